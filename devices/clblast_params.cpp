// clblast_params_get (clblast_params.h): clblast::RetrieveParameters, which has no C API.
#include "devices/clblast_params.h"

#include <clblast.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

extern "C" int clblast_params_get(cl_device_id dev, const char *kernel, ocl_kparams *out) {
    std::memset(out, 0, sizeof *out);
    try {
        std::unordered_map<std::string, size_t> params;
        clblast::StatusCode st =
            clblast::RetrieveParameters(dev, kernel, clblast::Precision::kSingle, params);
        if (st != clblast::StatusCode::kSuccess) return static_cast<int>(st);
        std::vector<std::pair<std::string, size_t>> sorted(params.begin(), params.end());
        std::sort(sorted.begin(), sorted.end());
        if (sorted.size() > OCL_KP_MAX) return static_cast<int>(clblast::StatusCode::kUnknownError);
        for (const auto &kv : sorted) {
            if (kv.first.size() >= sizeof out->name[0])
                return static_cast<int>(clblast::StatusCode::kUnknownError);
            std::memcpy(out->name[out->n], kv.first.c_str(), kv.first.size() + 1);
            out->value[out->n++] = kv.second;
        }
        return 0;
    } catch (...) { // out of memory; nothing may cross into C
        std::memset(out, 0, sizeof *out);
        return static_cast<int>(clblast::StatusCode::kUnknownError);
    }
}
