# Writes OUT: a C file defining ht_cl_embedded_source, the kernels/*.cl files concatenated in
# name order (the same order ocl_kernel_source reads them in), NUL-terminated.
# Usage: cmake -DKERNEL_DIR=... -DOUT=... -P embed_kernels.cmake
file(GLOB files "${KERNEL_DIR}/*.cl")
list(SORT files)
set(body "")
foreach(f ${files})
  file(READ "${f}" hex HEX)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," hex "${hex}")
  get_filename_component(name "${f}" NAME)
  string(APPEND body "/* ${name} */\n${hex}0x0a,\n")
endforeach()
file(WRITE "${OUT}.tmp"
  "/* Generated from the .cl files in kernels/ by tools/cmake/embed_kernels.cmake. */\n"
  "const char ht_cl_embedded_source[] = {\n${body}0x00};\n")
file(RENAME "${OUT}.tmp" "${OUT}")
