// Image folders (data_images.h): the scan (class folders sorted byte-wise, hidden entries
// skipped, nested folders followed), the decoders around TurboJPEG, libpng and giflib (BMP
// through TurboJPEG's loader), Keras's crop_to_aspect_ratio and bilinear resize (half-pixel
// centres, as tf.image.resize computes it), decoding on every core with a progress line, and
// the uint8 cache file keyed by the folder's contents and the size options.
#define _GNU_SOURCE // realpath, mkstemp's O_CLOEXEC-free use, strcasecmp
#include "data/data_images.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gif_lib.h>
#include <png.h>
#include <turbojpeg.h>

#include "core/ht_omp.h"

#define IMG_MAX_DEPTH 32               // nested folders followed below a class folder
#define IMG_MAX_FILE_BYTES (256u << 20) // larger files are refused as broken
#define IMG_MAX_PIXELS (1u << 26)       // decoded width x height (8192 x 8192)
#define CACHE_MAGIC "HTIMGC01"
// 3: caches before it may list a good JPEG decoded right after a broken one as skipped.
#define CACHE_VERSION 3u

// ---- the scan --------------------------------------------------------------------------------

typedef struct img_file {
    char *rel;      // relative to the folder
    int64_t size, mtime_ns;
    uint8_t label;
} img_file;

typedef struct scan {
    const char *root;
    img_file *f;
    int n, cap;
    ht_error *e;
} scan;

int data_is_dir(const char *path) {
    struct stat st;
    return path && stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int has_image_ext(const char *name) {
    const char *dot = strrchr(name, '.');
    static const char *const ext[] = {".jpg", ".jpeg", ".png", ".bmp", ".gif"};
    for (size_t i = 0; dot && i < sizeof ext / sizeof ext[0]; i++)
        if (!strcasecmp(dot, ext[i])) return 1;
    return 0;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

// The visible entries of a folder, sorted byte-wise (malloc'd names), in *out; -1 when it
// cannot be read.
static int list_dir(const char *path, char ***out, int *n, ht_error *e) {
    *out = NULL, *n = 0;
    DIR *d = opendir(path);
    if (!d) return ht_fail(e, "%s: cannot read the folder: %s", path, strerror(errno));
    int cap = 0;
    for (struct dirent *de; (de = readdir(d));) {
        if (de->d_name[0] == '.') continue; // hidden, . and ..
        if (*n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(*out, sizeof *grown * (size_t)cap);
            if (!grown) goto oom;
            *out = grown;
        }
        if (!((*out)[*n] = strdup(de->d_name))) goto oom;
        (*n)++;
    }
    closedir(d);
    if (*n) qsort(*out, (size_t)*n, sizeof **out, cmp_str);
    return 0;
oom:
    closedir(d);
    for (int i = 0; i < *n; i++) free((*out)[i]);
    free(*out);
    *out = NULL, *n = 0;
    return ht_fail(e, "%s: out of memory listing the folder", path);
}

static void free_list(char **l, int n) {
    for (int i = 0; i < n; i++) free(l[i]);
    free(l);
}

// The images under rel (relative to the root; a class folder or one inside it), in byte order
// of their paths, with their class's label.
static int walk(scan *s, const char *rel, uint8_t label, int depth) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", s->root, rel) >= (int)sizeof path)
        return ht_fail(s->e, "%s/%s: path too long", s->root, rel);
    char **names;
    int n;
    if (list_dir(path, &names, &n, s->e)) return -1;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        char sub[4096], full[4096 + 256];
        if (snprintf(sub, sizeof sub, "%s/%s", rel, names[i]) >= (int)sizeof sub) {
            rc = ht_fail(s->e, "%s/%s: path too long", path, names[i]);
            break;
        }
        snprintf(full, sizeof full, "%s/%s", s->root, sub);
        struct stat st;
        if (stat(full, &st) != 0) continue; // a dangling link
        if (S_ISDIR(st.st_mode)) {
            if (depth >= IMG_MAX_DEPTH)
                rc = ht_fail(s->e, "%s: folders nested deeper than %d (a link to a folder "
                             "above it?)", full, IMG_MAX_DEPTH);
            else rc = walk(s, sub, label, depth + 1);
            continue;
        }
        if (!S_ISREG(st.st_mode) || !has_image_ext(names[i])) continue;
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 1024;
            img_file *grown = realloc(s->f, sizeof *grown * (size_t)s->cap);
            if (!grown) {
                rc = ht_fail(s->e, "%s: out of memory listing the images", s->root);
                break;
            }
            s->f = grown;
        }
        if (s->n >= DATA_MAX_SAMPLES) {
            rc = ht_fail(s->e, "%s: more than %d images", s->root, DATA_MAX_SAMPLES);
            break;
        }
        img_file *f = &s->f[s->n];
        if (!(f->rel = strdup(sub))) {
            rc = ht_fail(s->e, "%s: out of memory listing the images", s->root);
            break;
        }
        f->size = (int64_t)st.st_size;
        f->mtime_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        f->label = label;
        s->n++;
    }
    free_list(names, n);
    return rc;
}

// ---- decoding --------------------------------------------------------------------------------

// A decoded image: 8-bit, ch channels (1 or 3), w x h, row-major.
typedef struct pix {
    uint8_t *p;
    int w, h, ch;
} pix;

static int read_all(const char *path, int64_t size, uint8_t **buf, size_t *len, char *why,
                    size_t cap) {
    if (size <= 0) return snprintf(why, cap, "an empty file"), -1;
    if ((uint64_t)size > IMG_MAX_FILE_BYTES)
        return snprintf(why, cap, "larger than %u MiB", IMG_MAX_FILE_BYTES >> 20), -1;
    FILE *f = fopen(path, "rb");
    if (!f) return snprintf(why, cap, "cannot open: %s", strerror(errno)), -1;
    *buf = malloc((size_t)size);
    *len = *buf ? fread(*buf, 1, (size_t)size, f) : 0;
    fclose(f);
    if (!*buf) return snprintf(why, cap, "out of memory"), -1;
    if (*len == 0) return snprintf(why, cap, "an empty file"), -1;
    return 0;
}

static void rgb_to_gray(const uint8_t *rgb, uint8_t *g, size_t n) {
    // TensorFlow's rgb_to_grayscale weights (ITU-R BT.601), rounded.
    for (size_t i = 0; i < n; i++)
        g[i] = (uint8_t)(0.2989f * rgb[3 * i] + 0.5870f * rgb[3 * i + 1] +
                         0.1140f * rgb[3 * i + 2] + 0.5f);
}

// JPEG through TurboJPEG: at a DCT-domain scale of 1/2, 1/4 or 1/8 where the image stays at
// least twice the target (tw x th) each way, which decodes many times faster.
static int decode_jpeg(tjhandle tj, const uint8_t *buf, size_t len, int ch, int tw, int th,
                       pix *out, char *why, size_t cap) {
    int w = 0, h = 0, sub, cs;
    if (tjDecompressHeader3(tj, buf, (unsigned long)len, &w, &h, &sub, &cs) < 0)
        return snprintf(why, cap, "a broken JPEG: %s", tjGetErrorStr2(tj)), -1;
    // TurboJPEG 2.1 passes a header cut short (its warning, a fake end of image) and leaves the
    // size unset: broken too.
    if (w < 1 || h < 1)
        return snprintf(why, cap, "a broken JPEG: %s", tjGetErrorStr2(tj)), -1;
    if ((uint64_t)w * (uint64_t)h > IMG_MAX_PIXELS)
        return snprintf(why, cap, "a JPEG of %dx%d pixels", w, h), -1;
    int nsf, sw = w, sh = h;
    tjscalingfactor *sf = tjGetScalingFactors(&nsf);
    for (int i = 0; sf && i < nsf; i++) {
        const int x = TJSCALED(w, sf[i]), y = TJSCALED(h, sf[i]);
        if (sf[i].num == 1 && (sf[i].denom == 2 || sf[i].denom == 4 || sf[i].denom == 8) &&
            x >= 2 * tw && y >= 2 * th && x < sw)
            sw = x, sh = y;
    }
    out->w = sw, out->h = sh, out->ch = ch;
    if (!(out->p = malloc((size_t)sw * sh * ch)))
        return snprintf(why, cap, "out of memory"), -1;
    if (tjDecompress2(tj, buf, (unsigned long)len, out->p, sw, 0, sh,
                      ch == 1 ? TJPF_GRAY : TJPF_RGB, TJFLAG_STOPONWARNING) < 0)
        return snprintf(why, cap, "a broken JPEG: %s", tjGetErrorStr2(tj)), -1;
    return 0;
}

// A file in memory as the libraries read it, from its start on (libpng's and giflib's readers).
typedef struct mem_src {
    const uint8_t *p;
    size_t len, at;
} mem_src;

static void png_read_mem(png_structp png, png_bytep data, png_size_t n) {
    mem_src *s = png_get_io_ptr(png);
    if (n > s->len - s->at) png_error(png, "the file ends early");
    memcpy(data, s->p + s->at, n);
    s->at += n;
}

typedef struct png_err {
    char *why;
    size_t cap;
} png_err;

static void png_on_error(png_structp png, png_const_charp msg) {
    png_err *pe = png_get_error_ptr(png);
    snprintf(pe->why, pe->cap, "a broken PNG: %s", msg);
    png_longjmp(png, 1);
}
static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

// PNG through libpng: palette and low bit depths expanded, 16 bits to 8 (scaled, as
// TensorFlow's decoder does), alpha dropped; colour to grey by rgb_to_gray.
static int decode_png(const uint8_t *buf, size_t len, int ch, pix *out, char *why, size_t cap) {
    png_err pe = {why, cap};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &pe, png_on_error,
                                             png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_read_struct(&png, &info, NULL);
        return snprintf(why, cap, "out of memory"), -1;
    }
    mem_src src = {buf, len, 0};
    uint8_t *volatile rgb = NULL;
    png_bytep *volatile rows = NULL;
    if (setjmp(png_jmpbuf(png))) {
        free(rgb);
        free(rows);
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, 1u << 16, 1u << 16);
    png_read_info(png, info);
    const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if ((uint64_t)w * h > IMG_MAX_PIXELS) png_error(png, "too many pixels");
    const int type = png_get_color_type(png, info);
    png_set_expand(png); // palette to RGB, grey below 8 bits to 8, tRNS to alpha
    png_set_scale_16(png);
    png_set_strip_alpha(png);
    png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 3) png_error(png, "unexpected row layout");
    rgb = malloc((size_t)w * h * 3);
    rows = malloc(sizeof *rows * h);
    if (!rgb || !rows) png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) rows[y] = rgb + (size_t)y * w * 3;
    png_read_image(png, rows);
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    out->w = (int)w, out->h = (int)h, out->ch = ch;
    if (ch == 3) {
        out->p = rgb;
        return 0;
    }
    if (!(out->p = malloc((size_t)w * h))) {
        free(rgb);
        return snprintf(why, cap, "out of memory"), -1;
    }
    if (type & PNG_COLOR_MASK_COLOR) rgb_to_gray(rgb, out->p, (size_t)w * h);
    else
        for (size_t i = 0; i < (size_t)w * h; i++) out->p[i] = rgb[3 * i];
    free(rgb);
    return 0;
}

static int gif_read_mem(GifFileType *g, GifByteType *data, int n) {
    mem_src *s = g->UserData;
    size_t k = (size_t)n < s->len - s->at ? (size_t)n : s->len - s->at;
    memcpy(data, s->p + s->at, k);
    s->at += k;
    return (int)k;
}

// giflib's words for an error (which has none for some codes, 0 among them).
static const char *gif_why(int code) {
    const char *s = GifErrorString(code);
    return s ? s : "unreadable";
}

// GIF through giflib's record reader: the first frame drawn on the screen's canvas (black
// elsewhere and at its transparent colour), as TensorFlow decodes a still; the frames after it
// are not read, and a frame's size is checked before its pixels are.
static int decode_gif(const uint8_t *buf, size_t len, int ch, pix *out, char *why, size_t cap) {
    mem_src src = {buf, len, 0};
    int err = 0;
    GifFileType *g = DGifOpen(&src, gif_read_mem, &err);
    if (!g) return snprintf(why, cap, "a broken GIF: %s", gif_why(err)), -1;
    const int W = g->SWidth, H = g->SHeight;
    GraphicsControlBlock gcb = {.TransparentColor = NO_TRANSPARENT_COLOR};
    uint8_t *rgb = NULL;
    GifPixelType *line = NULL;
    GifRecordType rt = UNDEFINED_RECORD_TYPE;
    const char *bad = NULL;
    if (W < 1 || H < 1 || (uint64_t)W * H > IMG_MAX_PIXELS) bad = "its screen size";
    while (!bad && !rgb) {
        if (DGifGetRecordType(g, &rt) == GIF_ERROR) {
            bad = gif_why(g->Error);
        } else if (rt == EXTENSION_RECORD_TYPE) {
            int code;
            GifByteType *ext;
            if (DGifGetExtension(g, &code, &ext) == GIF_ERROR) bad = gif_why(g->Error);
            if (!bad && code == GRAPHICS_EXT_FUNC_CODE && ext && ext[0] >= 4)
                DGifExtensionToGCB(ext[0], ext + 1, &gcb);
            while (!bad && ext)
                if (DGifGetExtensionNext(g, &ext) == GIF_ERROR) bad = gif_why(g->Error);
        } else if (rt == IMAGE_DESC_RECORD_TYPE) {
            if (DGifGetImageDesc(g) == GIF_ERROR) {
                bad = gif_why(g->Error);
                break;
            }
            const GifImageDesc *d = &g->Image;
            const ColorMapObject *cm = d->ColorMap ? d->ColorMap : g->SColorMap;
            if (!cm || d->Left < 0 || d->Top < 0 || d->Width < 1 || d->Height < 1 ||
                d->Left + d->Width > W || d->Top + d->Height > H) {
                bad = "its first frame lies outside its screen, or has no colours";
                break;
            }
            rgb = calloc((size_t)W * H, 3);
            line = malloc((size_t)d->Width);
            if (!rgb || !line) {
                bad = "out of memory";
                break;
            }
            // Interlaced rows come in four passes: from row 0 every 8th, 4 every 8th, 2 every
            // 4th, 1 every 2nd.
            static const int first[4] = {0, 4, 2, 1}, step[4] = {8, 8, 4, 2};
            for (int pass = 0; pass < (d->Interlace ? 4 : 1) && !bad; pass++)
                for (int y = d->Interlace ? first[pass] : 0; y < d->Height && !bad;
                     y += d->Interlace ? step[pass] : 1) {
                    if (DGifGetLine(g, line, d->Width) == GIF_ERROR) {
                        bad = gif_why(g->Error);
                        break;
                    }
                    for (int x = 0; x < d->Width; x++) {
                        const int c = line[x];
                        if (c == gcb.TransparentColor || c >= cm->ColorCount) continue;
                        uint8_t *o = rgb + ((size_t)(d->Top + y) * W + d->Left + x) * 3;
                        o[0] = cm->Colors[c].Red, o[1] = cm->Colors[c].Green,
                        o[2] = cm->Colors[c].Blue;
                    }
                }
        } else if (rt == TERMINATE_RECORD_TYPE) {
            bad = "no image in it";
        }
    }
    free(line);
    DGifCloseFile(g, &err);
    if (bad) {
        free(rgb);
        return snprintf(why, cap, "a broken GIF: %s", bad), -1;
    }
    out->w = W, out->h = H, out->ch = ch;
    if (ch == 3) {
        out->p = rgb;
        return 0;
    }
    out->p = malloc((size_t)W * H);
    if (out->p) rgb_to_gray(rgb, out->p, (size_t)W * H);
    free(rgb);
    return out->p ? 0 : (snprintf(why, cap, "out of memory"), -1);
}

static int32_t le32(const uint8_t *p) {
    return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                     (uint32_t)p[3] << 24);
}

// BMP through TurboJPEG's loader (which takes a file), after a look at the header: the loader
// allocates the image its header claims before reading it, so a size the file cannot hold is
// refused first.
static int decode_bmp(const char *path, const uint8_t *b, size_t len, int ch, pix *out, char *why,
                      size_t cap) {
    if (len < 30) return snprintf(why, cap, "a broken BMP: its header is cut short"), -1;
    const int64_t bw = le32(b + 18), bh = le32(b + 22), bpp = b[28] | b[29] << 8;
    const int64_t ah = bh < 0 ? -bh : bh, row = (bw * (bpp > 0 ? bpp : 1) + 31) / 32 * 4;
    if (bw < 1 || ah < 1 || bw * ah > IMG_MAX_PIXELS || bpp < 1 || bpp > 32 ||
        row * ah > (int64_t)len)
        return snprintf(why, cap, "a broken BMP: a %lldx%lld image of %lld bits a pixel in %zu "
                        "bytes", (long long)bw, (long long)bh, (long long)bpp, len), -1;
    int w = 0, h = 0, pf = TJPF_RGB;
    unsigned char *rgb = tjLoadImage(path, &w, 1, &h, &pf, 0);
    if (!rgb) return snprintf(why, cap, "a broken BMP: %s", tjGetErrorStr2(NULL)), -1;
    if ((uint64_t)w * h > IMG_MAX_PIXELS || w < 1 || h < 1) {
        tjFree(rgb);
        return snprintf(why, cap, "a BMP of %dx%d pixels", w, h), -1;
    }
    out->w = w, out->h = h, out->ch = ch;
    out->p = malloc((size_t)w * h * ch);
    if (out->p && ch == 3) memcpy(out->p, rgb, (size_t)w * h * 3);
    else if (out->p) rgb_to_gray(rgb, out->p, (size_t)w * h);
    tjFree(rgb);
    return out->p ? 0 : (snprintf(why, cap, "out of memory"), -1);
}

// By the file's first bytes, not its name.
static int decode_file(tjhandle tj, const char *path, const uint8_t *b, size_t len, int ch,
                       int tw, int th, pix *out, char *why, size_t cap) {
    if (len >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF)
        return decode_jpeg(tj, b, len, ch, tw, th, out, why, cap);
    if (len >= 8 && !memcmp(b, "\x89PNG\r\n\x1a\n", 8)) return decode_png(b, len, ch, out, why, cap);
    if (len >= 6 && (!memcmp(b, "GIF87a", 6) || !memcmp(b, "GIF89a", 6)))
        return decode_gif(b, len, ch, out, why, cap);
    if (len >= 2 && b[0] == 'B' && b[1] == 'M') return decode_bmp(path, b, len, ch, out, why, cap);
    return snprintf(why, cap, "not an image (no JPEG, PNG, GIF or BMP signature)"), -1;
}

// Keras's smart_resize crop: the largest centred window of th:tw.
static void crop_box(int w, int h, int tw, int th, int *x0, int *y0, int *cw, int *ch) {
    int crop_h = (int)((float)w * th / tw), crop_w = (int)((float)h * tw / th);
    crop_h = crop_h < h ? crop_h : h;
    crop_w = crop_w < w ? crop_w : w;
    *y0 = (int)((float)(h - crop_h) / 2), *x0 = (int)((float)(w - crop_w) / 2);
    *cw = crop_w > 0 ? crop_w : 1, *ch = crop_h > 0 ? crop_h : 1;
}

// Where output position i samples an input of n positions at scale s (TensorFlow's
// compute_interpolation_weights with half-pixel centres): between lo and hi, lerp of the way.
static void lerp_at(int i, float s, int n, int *lo, int *hi, float *lerp) {
    const float in = ((float)i + 0.5f) * s - 0.5f, f = floorf(in);
    const int c = (int)ceilf(in);
    *lo = f < 0 ? 0 : (int)f;
    *hi = c < n - 1 ? (c > 0 ? c : 0) : n - 1;
    *lerp = in - f;
}

// The horizontal pass of a row: out[x*C + c] = tl + (tr - tl) * lx at each output column's
// two input columns (xs: lo, hi; lx), as TensorFlow's kernel computes its top and bottom rows.
static void lerp_row(const uint8_t *row, const int *xs, const float *lx, int tw, int C,
                     float *out) {
    for (int x = 0; x < tw; x++) {
        const uint8_t *lo = row + (size_t)xs[2 * x] * C, *hi = row + (size_t)xs[2 * x + 1] * C;
        for (int c = 0; c < C; c++) {
            const float l = lo[c];
            out[x * C + c] = l + ((float)hi[c] - l) * lx[x];
        }
    }
}

// tf.image.resize(method="bilinear") of the window (x0, y0, cw, ch) of src into dst, (ch, th,
// tw) planes of rounded bytes: half-pixel centres, float arithmetic as TensorFlow's kernel
// (top = tl + (tr - tl) * lx, bottom likewise, then top + (bottom - top) * ly). The columns'
// weights are worked out once, and each input row's horizontal pass once for the output rows
// that read it in turn (ws: 2 rows of tw * C floats, 3 * tw numbers).
static void resize_bilinear(const pix *src, int x0, int y0, int cw, int chh, uint8_t *dst, int tw,
                            int th, float *ws) {
    const float sy = (float)chh / th, sx = (float)cw / tw;
    const int C = src->ch, row_n = tw * C;
    float *top = ws, *bot = ws + row_n, *lx = ws + 2 * row_n;
    int *xs = (int *)(lx + tw);
    for (int x = 0; x < tw; x++) {
        lerp_at(x, sx, cw, &xs[2 * x], &xs[2 * x + 1], &lx[x]);
        xs[2 * x] += x0, xs[2 * x + 1] += x0;
    }
    int have_lo = -1, have_hi = -1; // the input rows top and bot hold
    for (int y = 0; y < th; y++) {
        int ylo, yhi;
        float ly;
        lerp_at(y, sy, chh, &ylo, &yhi, &ly);
        if (ylo == have_hi && ylo != have_lo) { // moving down: the old bottom is the new top
            float *t = top;
            top = bot, bot = t;
            have_lo = have_hi, have_hi = -1;
        }
        if (ylo != have_lo)
            lerp_row(src->p + (size_t)(y0 + ylo) * src->w * C, xs, lx, tw, C, top), have_lo = ylo;
        if (yhi != have_hi)
            lerp_row(src->p + (size_t)(y0 + yhi) * src->w * C, xs, lx, tw, C, bot), have_hi = yhi;
        for (int x = 0; x < tw; x++)
            for (int c = 0; c < C; c++) {
                const float t = top[x * C + c], v = t + (bot[x * C + c] - t) * ly;
                dst[((size_t)c * th + y) * tw + x] =
                    (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v + 0.5f);
            }
    }
}

// Floats resize_bilinear's ws needs for a target tw wide of C channels.
static size_t resize_ws_floats(int tw, int C) { return (size_t)tw * (2 * (size_t)C + 3); }

// ---- the cache file --------------------------------------------------------------------------

typedef struct cache_head {
    char magic[8];
    uint32_t version, n, c, h, w, n_classes, n_files, skipped_bytes;
    uint64_t key;
} cache_head;

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

// The folder's contents (paths, sizes, times, classes) and the options that shape the pixels.
static uint64_t cache_key(const scan *s, const data_images_opts *o) {
    uint64_t h = 0xcbf29ce484222325ull;
    const uint32_t v[] = {CACHE_VERSION, (uint32_t)o->h, (uint32_t)o->w, (uint32_t)o->channels,
                          (uint32_t)o->crop, (uint32_t)s->n};
    h = fnv(h, v, sizeof v);
    for (int i = 0; i < s->n; i++) {
        h = fnv(h, s->f[i].rel, strlen(s->f[i].rel) + 1);
        h = fnv(h, &s->f[i].size, sizeof s->f[i].size);
        h = fnv(h, &s->f[i].mtime_ns, sizeof s->f[i].mtime_ns);
        h = fnv(h, &s->f[i].label, 1);
    }
    return h;
}

// The cache file's layout after its head (48 bytes): the file index of each sample (n uint32,
// aligned as the mapping is), labels (n), pixels (n, c, h, w bytes), the skipped lines
// (skipped_bytes).
_Static_assert(sizeof(cache_head) % 4 == 0, "the index after the head is 4-byte aligned");
static size_t cache_bytes(const cache_head *H) {
    return sizeof *H + (size_t)H->n * (1 + 4 + (size_t)H->c * H->h * H->w) + H->skipped_bytes;
}

static int cache_read(const char *path, uint64_t key, const data_images_opts *o, int n_files,
                      void **map, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    struct stat st;
    cache_head H;
    if (fstat(fd, &st) != 0 || (size_t)st.st_size < sizeof H ||
        read(fd, &H, sizeof H) != (ssize_t)sizeof H || memcmp(H.magic, CACHE_MAGIC, 8) ||
        H.version != CACHE_VERSION || H.key != key || H.c != (uint32_t)o->channels ||
        H.h != (uint32_t)o->h || H.w != (uint32_t)o->w || H.n_files != (uint32_t)n_files ||
        H.n > H.n_files || cache_bytes(&H) != (size_t)st.st_size) {
        close(fd);
        return -1;
    }
    *map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (*map == MAP_FAILED) return -1;
    *len = (size_t)st.st_size;
    return 0;
}

// Written whole to a temporary file renamed into place, so a reader sees a whole file or none;
// a cache that cannot be written only costs the next run its decoding.
static void cache_write(const char *path, const cache_head *H, const uint8_t *labels,
                        const uint32_t *index, const uint8_t *px, const char *skipped) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) return;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        close(fd);
        unlink(tmp);
        return;
    }
    const size_t sample = (size_t)H->c * H->h * H->w;
    int ok = fwrite(H, sizeof *H, 1, f) == 1 && fwrite(index, 4, H->n, f) == H->n &&
             fwrite(labels, 1, H->n, f) == H->n &&
             (H->n == 0 || fwrite(px, sample, H->n, f) == H->n) &&
             fwrite(skipped, 1, H->skipped_bytes, f) == H->skipped_bytes;
    ok &= fclose(f) == 0;
    if (!ok || rename(tmp, path) != 0) unlink(tmp);
}

// ---- loading ---------------------------------------------------------------------------------

void data_images_info_free(data_images_info *info) {
    if (!info) return;
    for (int i = 0; i < info->n_classes; i++) free(info->classes[i]);
    free(info->classes);
    for (int i = 0; i < info->n; i++) free(info->files[i]);
    free(info->files);
    free(info->skipped);
    memset(info, 0, sizeof *info);
}

int data_images_same_classes(const data_images_info *a, const char *a_dir,
                             const data_images_info *b, const char *b_dir, ht_error *e) {
    for (int i = 0; i < a->n_classes || i < b->n_classes; i++) {
        const char *x = i < a->n_classes ? a->classes[i] : NULL;
        const char *y = i < b->n_classes ? b->classes[i] : NULL;
        if (x && y && !strcmp(x, y)) continue;
        if (!y)
            return ht_fail(e, "%s has no class folder \"%s\", which %s has: the two must have "
                           "the same classes", b_dir, x, a_dir);
        if (!x || strcmp(x, y) > 0)
            return ht_fail(e, "%s has a class folder \"%s\", which %s has not: the two must have "
                           "the same classes", b_dir, y, a_dir);
        return ht_fail(e, "%s has no class folder \"%s\", which %s has: the two must have the "
                       "same classes", b_dir, x, a_dir);
    }
    return 0;
}

// Appends "<dir>/<rel>: <why>\n" to the skipped lines.
static int add_skipped(char **text, size_t *len, const char *dir, const char *rel,
                       const char *why) {
    size_t need = strlen(dir) + strlen(rel) + strlen(why) + 5;
    char *grown = realloc(*text, *len + need);
    if (!grown) return -1;
    *text = grown;
    *len += (size_t)snprintf(grown + *len, need, "%s/%s: %s\n", dir, rel, why);
    return 0;
}

// Decodes every file of s into px (one sample slot a file) on all cores; why[i] is "" for a
// file decoded, else why it was not.
static void decode_all(const scan *s, const data_images_opts *o, uint8_t *px, char (*why)[160]) {
    const size_t sample = (size_t)o->channels * o->h * o->w;
    const int nt = o->threads > 0 ? o->threads : omp_get_num_procs();
    (void)nt; // without OpenMP
    int done = 0;
    const double t0 = ht_now();
    double shown = t0;
#pragma omp parallel num_threads(nt)
    {
        tjhandle tj = tjInitDecompress();
        float *rws = malloc(sizeof *rws * resize_ws_floats(o->w, o->channels));
#pragma omp for schedule(dynamic, 8)
        for (int i = 0; i < s->n; i++) {
            char path[4096 + 256];
            snprintf(path, sizeof path, "%s/%s", s->root, s->f[i].rel);
            uint8_t *buf = NULL;
            size_t len = 0;
            pix p = {0};
            why[i][0] = 0;
            if (!tj) snprintf(why[i], sizeof why[i], "cannot start TurboJPEG");
            else if (read_all(path, s->f[i].size, &buf, &len, why[i], sizeof why[i]) == 0 &&
                     decode_file(tj, path, buf, len, o->channels, o->w, o->h, &p, why[i],
                                 sizeof why[i]) == 0) {
                int x0 = 0, y0 = 0, cw = p.w, chh = p.h;
                if (o->crop) crop_box(p.w, p.h, o->w, o->h, &x0, &y0, &cw, &chh);
                if (rws) resize_bilinear(&p, x0, y0, cw, chh, px + (size_t)i * sample, o->w, o->h, rws);
                else snprintf(why[i], sizeof why[i], "out of memory");
            } else if (!why[i][0]) {
                snprintf(why[i], sizeof why[i], "cannot be decoded");
            }
            free(buf);
            free(p.p);
            // A TurboJPEG 2.1 handle whose header read failed answers the next file's with no
            // size and the old error: a fresh one for the file after a failure.
            if (why[i][0] && tj) {
                tjDestroy(tj);
                tj = tjInitDecompress();
            }
            int k;
#pragma omp atomic capture
            k = ++done;
            if (o->progress && omp_get_thread_num() == 0) {
                const double now = ht_now();
                if (now - shown >= 0.5 || k == s->n) {
                    shown = now;
                    fprintf(stderr, "\rdecoding %s: %d of %d images (%.0f/s)", s->root, k, s->n,
                            k / (now - t0 > 1e-9 ? now - t0 : 1e-9));
                    fflush(stderr);
                }
            }
        }
        if (tj) tjDestroy(tj);
        free(rws);
    }
    if (o->progress) fprintf(stderr, "\rdecoding %s: %d images in %.1f s%20s\n", s->root, s->n,
                             ht_now() - t0, "");
}

static int scan_folder(scan *s, data_images_info *info, const char *dir, ht_error *e) {
    char **names;
    int n;
    if (list_dir(dir, &names, &n, e)) return -1;
    int rc = 0;
    info->classes = calloc((size_t)(n ? n : 1), sizeof *info->classes);
    if (!info->classes) rc = ht_fail(e, "%s: out of memory", dir);
    for (int i = 0; i < n && !rc; i++) {
        char full[4096 + 256];
        struct stat st;
        snprintf(full, sizeof full, "%s/%s", dir, names[i]);
        if (stat(full, &st) != 0 || !S_ISDIR(st.st_mode)) continue; // files beside the classes
        if (info->n_classes == DATA_MAX_CLASSES) {
            rc = ht_fail(e, "%s: more than %d class folders", dir, DATA_MAX_CLASSES);
            break;
        }
        const int before = s->n;
        if ((rc = walk(s, names[i], (uint8_t)info->n_classes, 0))) break;
        if (s->n == before) {
            rc = ht_fail(e, "%s: no images in the class folder (expected .jpg, .jpeg, .png, .bmp "
                         "or .gif files)", full);
            break;
        }
        info->classes[info->n_classes] = names[i];
        names[i] = NULL;
        info->n_classes++;
    }
    free_list(names, n);
    if (!rc && info->n_classes == 0)
        rc = ht_fail(e, "%s: no class folders: expected %s/<class name>/<image files>", dir, dir);
    return rc;
}

int dataset_load_images(dataset *d, data_images_info *info, const char *dir,
                        const data_images_opts *o, ht_error *e) {
    memset(d, 0, sizeof *d);
    memset(info, 0, sizeof *info);
    if (o->channels != 1 && o->channels != 3)
        return ht_fail(e, "%s: images go to a model of 1 (grayscale) or 3 (RGB) input channels, "
                       "not %d", dir, o->channels);
    if (o->h < 1 || o->w < 1 || o->h > DATA_MAX_DIM || o->w > DATA_MAX_DIM)
        return ht_fail(e, "%s: an image size of %dx%d", dir, o->h, o->w);
    const double t0 = ht_now();
    scan s = {.root = dir, .e = e};
    int rc = -1;
    uint8_t *px = NULL, *labels = NULL;
    uint32_t *index = NULL;
    char (*why)[160] = NULL, *skipped = NULL;
    void *map = NULL;
    size_t map_len = 0, skipped_len = 0;
    if (scan_folder(&s, info, dir, e)) goto out;
    const size_t sample = (size_t)o->channels * o->h * o->w;
    const uint64_t key = cache_key(&s, o);
    if (o->cache_dir) {
        char sub[900];
        if (snprintf(sub, sizeof sub, "%s/images", o->cache_dir) < (int)sizeof sub) {
            mkdir(o->cache_dir, 0755);
            mkdir(sub, 0755);
            snprintf(info->cache_path, sizeof info->cache_path, "%s/%016llx.u8", sub,
                     (unsigned long long)key);
        }
    }
    cache_head H = {.version = CACHE_VERSION, .c = (uint32_t)o->channels, .h = (uint32_t)o->h,
                    .w = (uint32_t)o->w, .n_classes = (uint32_t)info->n_classes,
                    .n_files = (uint32_t)s.n, .key = key};
    memcpy(H.magic, CACHE_MAGIC, 8);
    const uint8_t *px_from = NULL;
    if (info->cache_path[0] && cache_read(info->cache_path, key, o, s.n, &map, &map_len) == 0) {
        const cache_head *M = map;
        H = *M;
        index = (uint32_t *)((uint8_t *)map + sizeof H);
        labels = (uint8_t *)(index + H.n);
        px_from = labels + H.n;
        skipped = (char *)px_from + (size_t)H.n * sample;
        skipped_len = H.skipped_bytes;
        info->cached = 1;
        for (uint32_t i = 0; i < H.n; i++)
            if (index[i] >= (uint32_t)s.n || labels[i] >= info->n_classes) {
                munmap(map, map_len);
                map = NULL, info->cached = 0;
                break;
            }
    }
    if (!info->cached) {
        labels = NULL, index = NULL, skipped = NULL, skipped_len = 0;
        px = malloc(sample * (size_t)s.n);
        why = calloc((size_t)s.n, sizeof *why);
        labels = malloc((size_t)s.n);
        index = malloc(sizeof *index * (size_t)s.n);
        if (!px || !why || !labels || !index) {
            ht_fail(e, "%s: out of memory for %d images of %dx%dx%d", dir, s.n, o->channels, o->h,
                    o->w);
            goto out;
        }
        decode_all(&s, o, px, why);
        uint32_t n = 0;
        for (int i = 0; i < s.n; i++) {
            if (why[i][0]) {
                if (o->strict) {
                    ht_fail(e, "%s/%s: %s (--strict-images)", dir, s.f[i].rel, why[i]);
                    goto out;
                }
                if (add_skipped(&skipped, &skipped_len, dir, s.f[i].rel, why[i])) {
                    ht_fail(e, "%s: out of memory", dir);
                    goto out;
                }
                continue;
            }
            if (n != (uint32_t)i) memmove(px + (size_t)n * sample, px + (size_t)i * sample, sample);
            labels[n] = s.f[i].label;
            index[n++] = (uint32_t)i;
        }
        H.n = n;
        H.skipped_bytes = (uint32_t)skipped_len;
        if (info->cache_path[0]) cache_write(info->cache_path, &H, labels, index, px,
                                             skipped ? skipped : "");
        px_from = px;
    }
    if (H.n == 0) {
        ht_fail(e, "%s: none of its %d images could be decoded (the first: %.*s)", dir, s.n,
                (int)strcspn(skipped ? skipped : "", "\n"), skipped ? skipped : "");
        goto out;
    }
    d->n = (int)H.n, d->c = o->channels, d->h = o->h, d->w = o->w, d->ylen = 1;
    d->y = malloc(H.n);
    info->files = calloc(H.n, sizeof *info->files);
    info->skipped = malloc(skipped_len + 1);
    if (!d->y || !info->files || !info->skipped) {
        ht_fail(e, "%s: out of memory for %u images", dir, H.n);
        goto out;
    }
    // The pixels stay bytes: the cache file's mapping, or what was decoded (dataset.x8).
    d->x8 = px_from;
    d->x8_scale = o->scale > 0 ? o->scale : 1.0f;
    if (map) {
        d->x8_base = map, d->x8_len = map_len, d->x8_mapped = 1;
        map = NULL; // the dataset's now: labels, index and skipped lie in it too, read below
    } else {
        d->x8_base = px, d->x8_len = sample * H.n;
        px = NULL;
    }
    memcpy(info->skipped, skipped ? skipped : "", skipped_len);
    info->skipped[skipped_len] = 0;
    for (size_t i = 0; i < skipped_len; i++) info->n_skipped += info->skipped[i] == '\n';
    memcpy(d->y, labels, H.n);
    for (uint32_t i = 0; i < H.n; i++) {
        if (!(info->files[i] = strdup(s.f[index[i]].rel))) {
            ht_fail(e, "%s: out of memory", dir);
            goto out;
        }
        info->n = (int)i + 1;
    }
    info->seconds = ht_now() - t0;
    rc = 0;
out:
    if (map) munmap(map, map_len);
    else if (!d->x8_mapped) free(labels), free(index), free(skipped);
    free(px);
    free(why);
    for (int i = 0; i < s.n; i++) free(s.f[i].rel);
    free(s.f);
    if (rc) {
        dataset_free(d);
        data_images_info_free(info);
    }
    return rc;
}
