// Keras's HDF5 weight files (kerash5.h): a plan that pairs each hetrain layer with weights with
// its Keras layer and variables, then one writer (Keras 3's layout) and one reader (Keras 3's
// and Keras 2's layouts). Both reorder through the same index map, so a save and a load give
// back the same bits.
#include "io/kerash5.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "io/safetensors.h"
#include "io/stfile.h"
#include "nn/layer_desc.h"

#define KH5_MAX_VARS 4

typedef struct kh5_var {
    const char *name;      // Keras's: "kernel", "bias", "gamma", ...
    const model_tensor *t; // hetrain's tensor
    int ndim;
    hsize_t dims[4];       // Keras's shape
    layer_keras_layout order;
    size_t oc, c, h, w;    // CONV: OC, C, K, K; DENSE: OUT and its input map (C,H,W);
                           // DEPTHWISE: M, C, K, K
    int chw;               // DENSE: Keras's inputs in (C,H,W) order too (model.keras_flatten_chw)
} kh5_var;

typedef struct kh5_layer {
    int l;                     // index into m->layers
    const char *cls;           // Keras's class
    char path[80];             // Keras 3's group: "conv2d_1", "sequential/layers/conv2d"
    int pos;                   // its place among the model's layers of its class, from 0
    int nv;
    kh5_var v[KH5_MAX_VARS];
    const model_tensor *count; // a tensor with no Keras counterpart (LKW_NONE), or NULL
} kh5_layer;

typedef struct kh5_plan {
    int n;
    kh5_layer *L;
    size_t max_n; // the largest variable's element count
} kh5_plan;

// Keras 3's group name for a layer class (keras.src.utils.naming.to_snake_case): an
// underscore before a capital that starts a lowercase run or follows a lowercase letter, all
// lowercase ("BatchNormalization": "batch_normalization", "Conv2D": "conv2d").
static void snake_case(const char *cls, char *out, size_t cap) {
    size_t n = 0;
    for (size_t i = 0; cls[i] && n + 2 < cap; i++) {
        const char ch = cls[i];
        const int up = ch >= 'A' && ch <= 'Z';
        const int low_next = cls[i + 1] >= 'a' && cls[i + 1] <= 'z';
        const int low_prev = i > 0 && cls[i - 1] >= 'a' && cls[i - 1] <= 'z';
        if (up && i > 0 && (low_next || low_prev) && out[n - 1] != '_') out[n++] = '_';
        out[n++] = up ? (char)(ch - 'A' + 'a') : ch;
    }
    out[n] = 0;
}

// Whether Keras's weight files hold kind k's tensors: its family has Keras variables and the
// kind a Keras class.
static int kh5_holds(int k) {
    return layer_descs[k].keras_class && layer_descs[k].family->n_keras_vars > 0;
}

// "Conv2D, Dense and BatchNormalization": the classes whose weights the files hold.
static const char *kh5_class_list(void) {
    static char list[200];
    if (list[0]) return list;
    int n = 0, total = 0;
    for (int k = 0; k < LAYER_KIND_COUNT; k++) total += kh5_holds(k);
    size_t len = 0;
    for (int k = 0; k < LAYER_KIND_COUNT && len < sizeof list; k++)
        if (kh5_holds(k)) {
            n++;
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%s",
                                    n == 1 ? "" : n == total ? " and " : ", ",
                                    layer_descs[k].keras_class);
        }
    return list;
}

// ---- the plan -------------------------------------------------------------------------------

static void add_var(kh5_layer *K, const char *name, const model_tensor *t,
                    layer_keras_layout order) {
    kh5_var *v = &K->v[K->nv++];
    *v = (kh5_var){.name = name, .t = t, .order = order};
    if (order == LKW_CONV) { // (OC,C,K,K) -> (K,K,C,OC)
        v->oc = t->shape[0], v->c = t->shape[1], v->h = t->shape[2], v->w = t->shape[3];
        v->ndim = 4;
        v->dims[0] = v->h, v->dims[1] = v->w, v->dims[2] = v->c, v->dims[3] = v->oc;
    } else if (order == LKW_DENSE) { // (OUT,IN) -> (IN,OUT)
        v->oc = t->shape[0];
        v->ndim = 2;
        v->dims[0] = t->shape[1], v->dims[1] = t->shape[0];
    } else if (order == LKW_SCALAR) { // a count: shape (), an integer in Keras's files
        v->ndim = 0;
    } else {
        v->ndim = 1;
        v->dims[0] = t->n;
    }
}

// The (C,H,W) map a dense layer's inputs flatten: its input layer's output. A layer after a
// dense, or after global pooling, sees (n,1,1), whose order is the same both ways.
static void dense_input(const model *m, int l, kh5_var *v) {
    size_t in = v->dims[0];
    size_t c = (size_t)m->in_c, h = (size_t)m->in_h, w = (size_t)m->in_w;
    if (l > 0) {
        const layer *P = &m->layers[l - 1];
        c = (size_t)P->oc, h = (size_t)P->oh, w = (size_t)P->ow;
    }
    if (c * h * w != in) c = in, h = 1, w = 1;
    v->c = c, v->h = h, v->w = w;
    v->chw = m->keras_flatten_chw;
}

static void plan_free(kh5_plan *p) {
    free(p->L);
    *p = (kh5_plan){0};
}

static int plan_build(const char *path, const model *m, kh5_plan *p, ht_error *e) {
    *p = (kh5_plan){0};
    const model_tensor *ts;
    int nt;
    if (safetensors_tensors(path, m, &ts, &nt, e)) return -1;
    if (!(p->L = ht_calloc((size_t)m->n_layers + 1, sizeof *p->L, e))) return -1;
    // Keras numbers each class's layers within their container: the model's own layers, and
    // each Sequential inside it (model.h: keras_seq) apart.
    int n_seq = 0;
    for (int l = 0; l < m->n_layers; l++)
        if (m->layers[l].keras_seq > n_seq) n_seq = m->layers[l].keras_seq;
    int (*seen)[LAYER_KIND_COUNT] = ht_calloc((size_t)n_seq + 1, sizeof *seen, e);
    if (!seen) {
        plan_free(p);
        return -1;
    }
    for (int l = 0; l < m->n_layers; l++) {
        const model_tensor *wt = NULL, *bt = NULL, *st[4] = {NULL};
        int any = 0;
        for (int i = 0; i < nt; i++) {
            if (ts[i].layer != l) continue;
            any = 1;
            if (ts[i].state != TENSOR_TRAINABLE) st[ts[i].state] = &ts[i];
            else if (ts[i].bias) bt = &ts[i];
            else wt = &ts[i];
        }
        if (!any) continue;
        const layer *L = &m->layers[l];
        if (!kh5_holds(L->kind)) {
            plan_free(p);
            free(seen);
            return ht_fail(e, "%s: layer %d \"%s\" (%s) has weights but no Keras layer to hold "
                              "them (Keras weight files hold %s)", path, l, L->name,
                           model_kind_name(L->kind), kh5_class_list());
        }
        const layer_desc *d = layer_desc_of(L->kind);
        // Keras's class: its kind's, or the one it was read as (model.h: keras_as).
        const int as = L->keras_as ? L->keras_as - 1 : (int)L->kind;
        const char *cls = layer_desc_of((layer_kind)as)->keras_class;
        if (L->keras_seq < 0) {
            plan_free(p);
            free(seen);
            return ht_fail(e, "%s: layer %d \"%s\" (%s) is in a Sequential inside a Sequential "
                              "inside the Keras model: hetrain reads and writes the weights of "
                              "one level of Sequentials inside a model", path, l, L->name,
                           model_kind_name(L->kind));
        }
        kh5_layer *K = &p->L[p->n++];
        char snake[40], within[40] = "";
        snake_case(cls, snake, sizeof snake);
        K->l = l;
        K->cls = cls;
        const int q = L->keras_seq, nth = seen[q][as];
        if (q > 1) snprintf(within, sizeof within, "sequential_%d/layers/", q - 1);
        else if (q == 1) snprintf(within, sizeof within, "sequential/layers/");
        if (nth) snprintf(K->path, sizeof K->path, "%s%s_%d", within, snake, nth);
        else snprintf(K->path, sizeof K->path, "%s%s", within, snake);
        K->pos = seen[q][as]++;
        // The family's variables in Keras's order, each the layer's tensor it names.
        for (int r = 0; r < d->family->n_keras_vars; r++) {
            const layer_keras_var *kv = &d->family->keras_vars[r];
            const model_tensor *t = kv->state ? st[kv->state] : kv->bias ? bt : wt;
            const int rank = kv->layout == LKW_CONV || kv->layout == LKW_DEPTHWISE ? 4
                             : kv->layout == LKW_DENSE                            ? 2
                                                                                  : 0;
            if (kv->required && (!t || (rank && t->ndim != rank))) {
                plan_free(p);
                free(seen);
                return ht_fail(e, "%s: layer %d \"%s\" (%s) has no %s of Keras's rank", path, l,
                               L->name, model_kind_name(L->kind), kv->name ? kv->name : "tensor");
            }
            if (!t) continue;
            if (kv->layout == LKW_NONE) {
                K->count = t;
                continue;
            }
            // A dwconv read from Conv2D: Conv2D's "kernel".
            add_var(K, L->keras_as && kv->layout == LKW_DEPTHWISE ? "kernel" : kv->name, t,
                    kv->layout);
            if (kv->layout == LKW_DENSE) dense_input(m, l, &K->v[K->nv - 1]);
            if (kv->layout == LKW_DEPTHWISE) { // (C*M,1,K,K) -> (K,K,C,M)
                kh5_var *v = &K->v[K->nv - 1];
                v->oc = (size_t)L->mult, v->c = (size_t)L->c, v->h = v->w = (size_t)L->k;
                v->ndim = 4;
                v->dims[0] = v->h, v->dims[1] = v->w, v->dims[2] = v->c, v->dims[3] = v->oc;
                if (L->keras_as == 1 + LAYER_CONV2D) // Conv2D's (K,K,1,C*M): the same order
                    v->dims[2] = 1, v->dims[3] = v->c * v->oc;
            }
            if (kv->layout == LKW_CONV && L->keras_as == 1 + LAYER_DENSE) {
                kh5_var *v = &K->v[K->nv - 1]; // Dense's (C,OC) of a 1x1: the same order
                v->ndim = 2, v->dims[0] = v->c, v->dims[1] = v->oc;
            }
        }
        for (int i = 0; i < K->nv; i++)
            if (K->v[i].t->n > p->max_n) p->max_n = K->v[i].t->n;
    }
    free(seen);
    return 0;
}

// Where hetrain's element i of v's tensor sits in Keras's variable.
static size_t keras_index(const kh5_var *v, size_t i) {
    if (v->order == LKW_CONV) {
        size_t k = v->h, ckk = v->c * k * k;
        size_t oc = i / ckk, r = i % ckk, c = r / (k * k), y = r / k % k, x = r % k;
        return ((y * k + x) * v->c + c) * v->oc + oc;
    }
    if (v->order == LKW_DEPTHWISE) {
        size_t k = v->h, oc = i / (k * k), r = i % (k * k), y = r / k, x = r % k;
        return ((y * k + x) * v->c + oc / v->oc) * v->oc + oc % v->oc;
    }
    if (v->order == LKW_DENSE) {
        size_t in = v->c * v->h * v->w, o = i / in, r = i % in;
        if (v->chw) return r * v->oc + o; // Keras's inputs in (C,H,W) order too
        size_t c = r / (v->h * v->w), y = r / v->w % v->h, x = r % v->w;
        return ((y * v->w + x) * v->c + c) * v->oc + o;
    }
    return i;
}

// "kernel, bias" for messages.
static const char *var_list(const kh5_layer *K, char *buf, size_t cap) {
    size_t k = 0;
    buf[0] = 0;
    for (int i = 0; i < K->nv && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%s", i ? ", " : "", K->v[i].name);
    return buf;
}

static const char *shape_text(char *buf, size_t cap, int nd, const hsize_t *d) {
    size_t k = (size_t)snprintf(buf, cap, "(");
    for (int i = 0; i < nd && k < cap; i++)
        k += (size_t)snprintf(buf + k, cap - k, "%s%llu", i ? ", " : "", (unsigned long long)d[i]);
    if (k < cap) snprintf(buf + k, cap - k, nd == 1 ? ",)" : ")");
    return buf;
}

// ---- HDF5 helpers ---------------------------------------------------------------------------

// libhdf5 prints its error stack to stderr unless told not to; hetrain reports one line.
static void h5_quiet(void) { H5Eset_auto2(H5E_DEFAULT, NULL, NULL); }

static herr_t h5_why_cb(unsigned n, const H5E_error2_t *err, void *data) {
    if (n == 0 && err->desc) snprintf(data, 160, "%s", err->desc);
    return 0;
}

// The innermost reason on libhdf5's error stack, for a message.
static const char *h5_why(char *buf) {
    snprintf(buf, 160, "libhdf5 gave no reason");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_why_cb, buf);
    for (char *s = buf; *s; s++)
        if (*s == '\n') *s = ' ';
    return buf;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcasecmp(s + n - k, suffix);
}

static const unsigned char h5_magic[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

// HDF5's signature sits at 0, or at 512, 1024, 2048, ... after a user block.
static int has_h5_signature(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC), found = 0;
    if (fd < 0) return 0;
    for (off_t at = 0; at <= (off_t)1 << 30 && !found; at = at ? 2 * at : 512) {
        unsigned char b[8];
        if (pread(fd, b, sizeof b, at) != (ssize_t)sizeof b) break;
        found = !memcmp(b, h5_magic, sizeof b);
    }
    close(fd);
    return found;
}

int kerash5_is_path(const char *path, int reading) {
    if (ends_with(path, ".h5") || ends_with(path, ".hdf5") || ends_with(path, ".keras")) return 1;
    return reading && has_h5_signature(path);
}

// ---- write ----------------------------------------------------------------------------------

static int put_attr(hid_t obj, const char *attr, const char *value) {
    hid_t t = H5Tcopy(H5T_C_S1), s = H5Screate(H5S_SCALAR), a = -1;
    int rc = -1;
    if (t >= 0 && s >= 0 && H5Tset_size(t, H5T_VARIABLE) >= 0 &&
        H5Tset_cset(t, H5T_CSET_UTF8) >= 0 &&
        (a = H5Acreate2(obj, attr, t, s, H5P_DEFAULT, H5P_DEFAULT)) >= 0)
        rc = H5Awrite(a, t, &value) < 0 ? -1 : 0;
    if (a >= 0) H5Aclose(a);
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    return rc;
}

static int put_var(hid_t vars, int i, const kh5_var *v, const float *params, float *buf) {
    const float *src = params + v->t->off;
    for (size_t k = 0; k < v->t->n; k++) buf[keras_index(v, k)] = src[k];
    char name[16];
    snprintf(name, sizeof name, "%d", i);
    const int count = v->order == LKW_SCALAR; // Keras's int64 scalar
    hid_t s = count ? H5Screate(H5S_SCALAR) : H5Screate_simple(v->ndim, v->dims, NULL), d = -1;
    int rc = -1;
    if (s >= 0 &&
        (d = H5Dcreate2(vars, name, count ? H5T_STD_I64LE : H5T_IEEE_F32LE, s, H5P_DEFAULT,
                        H5P_DEFAULT, H5P_DEFAULT)) >= 0)
        rc = H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0 ? -1 : 0;
    if (d >= 0) H5Dclose(d);
    if (s >= 0) H5Sclose(s);
    return rc;
}

// One layer's layers/<path>/vars group with its variables.
static int put_layer(hid_t layers, const kh5_layer *K, const model *m, const float *params,
                     float *buf) {
    // A layer of a Sequential inside the model: its groups ("sequential/layers") made on the way.
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    if (lcpl < 0 || H5Pset_create_intermediate_group(lcpl, 1) < 0) {
        if (lcpl >= 0) H5Pclose(lcpl);
        return -1;
    }
    hid_t g = H5Gcreate2(layers, K->path, lcpl, H5P_DEFAULT, H5P_DEFAULT), vars = -1;
    H5Pclose(lcpl);
    int rc = -1;
    if (g >= 0 && (vars = H5Gcreate2(g, "vars", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) >= 0 &&
        put_attr(vars, "name", m->layers[K->l].name) == 0) {
        rc = 0;
        for (int i = 0; i < K->nv && rc == 0; i++) rc = put_var(vars, i, &K->v[i], params, buf);
    }
    if (vars >= 0) H5Gclose(vars);
    if (g >= 0) H5Gclose(g);
    return rc;
}

static int check_name(const char *path, ht_error *e) {
    if (!ends_with(path, ".weights.h5"))
        return ht_fail(e, "%s: hetrain writes Keras weights as Keras 3's .weights.h5 (which "
                          "model.load_weights of Keras 3 and tf_keras reads); name the file "
                          "*.weights.h5, or *.safetensors for PyTorch's layout", path);
    return 0;
}

int kerash5_check_save(const char *path, const model *m, ht_error *e) {
    if (check_name(path, e)) return -1;
    kh5_plan p;
    if (plan_build(path, m, &p, e)) return -1;
    plan_free(&p);
    return 0;
}

int kerash5_save(const char *path, const model *m, const float *params, ht_error *e) {
    kh5_plan p;
    if (check_name(path, e) || plan_build(path, m, &p, e)) return -1;
    h5_quiet();
    int rc = -1, created = 0;
    char why[160];
    hid_t f = -1, g = -1;
    size_t tmplen = strlen(path) + 32;
    char *tmp = ht_malloc(tmplen, 1, e);
    float *buf = tmp ? ht_malloc(p.max_n + 1, sizeof *buf, e) : NULL;
    if (!buf) goto done;
    snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid());
    f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) {
        ht_fail(e, "%s: cannot create temporary file %s: %s", path, tmp, h5_why(why));
        goto done;
    }
    created = 1;
    if ((g = H5Gcreate2(f, "layers", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0) goto h5_error;
    for (int i = 0; i < p.n; i++)
        if (put_layer(g, &p.L[i], m, params, buf)) {
            ht_fail(e, "%s: writing layers/%s (layer \"%s\") to %s: %s", path, p.L[i].path,
                    m->layers[p.L[i].l].name, tmp, h5_why(why));
            goto done;
        }
    H5Gclose(g);
    // The model's own variables (none), named as Keras names the group.
    if ((g = H5Gcreate2(f, "vars", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT)) < 0 ||
        put_attr(g, "name", m->name))
        goto h5_error;
    // The class names (hetrain's own attribute: Keras reads past it).
    if (m->n_class_names) {
        char *classes = model_classes_json(m, e);
        int bad = !classes || put_attr(f, "class_names", classes);
        free(classes);
        if (!classes) goto done;
        if (bad) goto h5_error;
    }
    H5Gclose(g);
    g = -1;
    herr_t cr = H5Fclose(f);
    f = -1;
    if (cr < 0) goto h5_error;
    int fd = open(tmp, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fsync(fd)) {
        ht_fail(e, "%s: writing %s: %s", path, tmp, strerror(errno));
        if (fd >= 0) close(fd);
        goto done;
    }
    close(fd);
    if (stfile_publish(tmp, path, e)) goto done;
    rc = 0;
    goto done;
h5_error:
    ht_fail(e, "%s: writing %s: %s", path, tmp, h5_why(why));
done:
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    if (rc && created) unlink(tmp);
    free(tmp);
    free(buf);
    plan_free(&p);
    return rc;
}

// ---- read -----------------------------------------------------------------------------------

typedef struct kh5_strs {
    char **s;
    int n;
} kh5_strs;

static void strs_free(kh5_strs *x) {
    for (int i = 0; i < x->n; i++) free(x->s[i]);
    free(x->s);
    *x = (kh5_strs){0};
}

// Appends the strings of attribute `name` of obj: fixed-length (Keras 2 before h5py 3) or
// variable-length, a list or a scalar.
static int strs_read(hid_t obj, const char *name, kh5_strs *out) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t ft = a >= 0 ? H5Aget_type(a) : -1, sp = a >= 0 ? H5Aget_space(a) : -1, mt = -1;
    hssize_t np = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    int rc = -1;
    char **grown = NULL;
    // An empty list is an empty float64 array (numpy's default for []).
    if (ft >= 0 && np == 0) {
        rc = 0;
        goto done;
    }
    if (ft < 0 || np < 0 || H5Tget_class(ft) != H5T_STRING || np > 1 << 24) goto done;
    if (!(grown = realloc(out->s, ((size_t)out->n + (size_t)np + 1) * sizeof *grown))) goto done;
    out->s = grown;
    if (H5Tis_variable_str(ft) > 0) {
        char **v = calloc((size_t)np, sizeof *v);
        if (!v || (mt = H5Tcopy(H5T_C_S1)) < 0 || H5Tset_size(mt, H5T_VARIABLE) < 0 ||
            H5Tset_cset(mt, H5Tget_cset(ft)) < 0 || H5Aread(a, mt, v) < 0) {
            free(v);
            goto done;
        }
        rc = 0;
        for (hssize_t i = 0; i < np; i++) {
            char *s = strdup(v[i] ? v[i] : "");
            if (!s) rc = -1;
            else out->s[out->n++] = s;
            H5free_memory(v[i]);
        }
        free(v);
    } else {
        size_t sz = H5Tget_size(ft);
        char *raw = sz ? calloc((size_t)np, sz) : NULL;
        if (!raw || H5Aread(a, ft, raw) < 0) {
            free(raw);
            goto done;
        }
        rc = 0;
        for (hssize_t i = 0; i < np && rc == 0; i++) {
            const char *s = raw + (size_t)i * sz;
            char *d = strndup(s, strnlen(s, sz));
            if (!d) rc = -1;
            else out->s[out->n++] = d;
        }
        free(raw);
    }
done:
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    if (a >= 0) H5Aclose(a);
    return rc;
}

// Keras 2's string-list attribute, split into name0, name1, ... when it outgrew an object
// header (legacy save_attributes_to_hdf5_group). 1 when absent.
static int attr_strings(hid_t obj, const char *name, kh5_strs *out) {
    *out = (kh5_strs){0};
    if (H5Aexists(obj, name) > 0) return strs_read(obj, name, out);
    char part[64];
    int k = 0;
    for (;; k++) {
        snprintf(part, sizeof part, "%s%d", name, k);
        if (H5Aexists(obj, part) <= 0) break;
        if (strs_read(obj, part, out)) {
            strs_free(out);
            return -1;
        }
    }
    return k ? 0 : 1;
}

typedef struct kh5_in {
    const char *path;
    const model *m;
    float *out; // the scratch parameters
    float *buf; // one variable in Keras's order
    ht_error *e;
    load_partial *pl; // by name (partial.h): what is left is listed here; NULL: every layer
} kh5_in;

// Whether dataset dname at loc has v's shape: 1, or 0 with what it has in found ("missing",
// or its shape).
static int var_fits(hid_t loc, const char *dname, const kh5_var *v, char *found, size_t cap) {
    if (H5Lexists(loc, dname, H5P_DEFAULT) <= 0) {
        snprintf(found, cap, "missing");
        return 0;
    }
    hid_t d = H5Dopen2(loc, dname, H5P_DEFAULT);
    hid_t s = d >= 0 ? H5Dget_space(d) : -1;
    hsize_t dims[H5S_MAX_RANK];
    int nd = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    int same = nd >= 0 && nd <= H5S_MAX_RANK && H5Sget_simple_extent_dims(s, dims, NULL) >= 0 &&
               nd == v->ndim;
    for (int i = 0; same && i < nd; i++) same = dims[i] == v->dims[i];
    if (!same) {
        if (nd >= 0 && nd <= H5S_MAX_RANK) shape_text(found, cap, nd, dims);
        else snprintf(found, cap, "unreadable");
    }
    if (s >= 0) H5Sclose(s);
    if (d >= 0) H5Dclose(d);
    return same;
}

// By name: whether layer K's variables (names[v] at loc) all have its shapes; if not, the layer
// is left at its initial values and listed (skip_mismatch), or it is an error: -1.
static int partial_fits(kh5_in *in, hid_t loc, const char *const *names, const char *where,
                        const kh5_layer *K) {
    char found[96], want[96];
    for (int v = 0; v < K->nv; v++) {
        if (var_fits(loc, names[v], &K->v[v], found, sizeof found)) continue;
        shape_text(want, sizeof want, K->v[v].ndim, K->v[v].dims);
        const char *lname = in->m->layers[K->l].name;
        if (!in->pl->skip_mismatch)
            return ht_fail(in->e, "%s: %s/%s, the %s of layer \"%s\" (%s): %s where the model has "
                           "%s (--skip-mismatch leaves such a layer at its initial values)",
                           in->path, where, names[v], K->v[v].name, lname, K->cls, found, want);
        if (load_partial_note(in->pl, "layer \"%s\" (%s): its %s is %s in %s, %s here: left at "
                              "its initial values", lname, K->cls, K->v[v].name, found, in->path,
                              want))
            return ht_fail(in->e, "out of memory");
        return 0;
    }
    return 1;
}

// Reads dataset `where` (at loc as dname) into variable v of layer K. where is its path in
// the file, for messages.
static int read_var(kh5_in *in, hid_t loc, const char *dname, const char *where,
                    const kh5_layer *K, const kh5_var *v) {
    const char *lname = in->m->layers[K->l].name;
    char why[160], a[96], b[96];
    hid_t d = H5Dopen2(loc, dname, H5P_DEFAULT);
    if (d < 0)
        return ht_fail(in->e, "%s: %s, the %s of layer \"%s\" (%s): cannot open it: %s",
                       in->path, where, v->name, lname, K->cls, h5_why(why));
    hid_t t = H5Dget_type(d), s = H5Dget_space(d);
    int rc = -1;
    hsize_t dims[H5S_MAX_RANK];
    int nd = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
    if (t < 0 || nd < 0 || nd > H5S_MAX_RANK || H5Sget_simple_extent_dims(s, dims, NULL) < 0) {
        ht_fail(in->e, "%s: %s, the %s of layer \"%s\" (%s): unreadable: %s", in->path, where,
                v->name, lname, K->cls, h5_why(why));
        goto done;
    }
    // A count (LKW_SCALAR) is an integer; anything else floats.
    if (H5Tget_class(t) != H5T_FLOAT && !(v->order == LKW_SCALAR && H5Tget_class(t) == H5T_INTEGER)) {
        ht_fail(in->e, "%s: %s, the %s of layer \"%s\" (%s): holds %s, expected floats",
                in->path, where, v->name, lname, K->cls,
                H5Tget_class(t) == H5T_INTEGER ? "integers"
                : H5Tget_class(t) == H5T_STRING ? "strings" : "a type that is not a number");
        goto done;
    }
    int same = nd == v->ndim;
    for (int i = 0; same && i < nd; i++) same = dims[i] == v->dims[i];
    if (!same) {
        ht_fail(in->e, "%s: %s, the %s of layer \"%s\" (%s): expected shape %s, found %s",
                in->path, where, v->name, lname, K->cls, shape_text(a, sizeof a, v->ndim, v->dims),
                shape_text(b, sizeof b, nd, dims));
        goto done;
    }
    if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, in->buf) < 0) {
        ht_fail(in->e, "%s: %s, the %s of layer \"%s\" (%s): cannot read it: %s", in->path,
                where, v->name, lname, K->cls, h5_why(why));
        goto done;
    }
    for (size_t k = 0; k < v->t->n; k++)
        if (!isfinite(in->buf[k])) {
            ht_fail(in->e, "%s: %s, the %s of layer \"%s\" (%s): element %zu is %s", in->path,
                    where, v->name, lname, K->cls, k, isnan(in->buf[k]) ? "NaN" : "infinite");
            goto done;
        }
    float *dst = in->out + v->t->off;
    for (size_t k = 0; k < v->t->n; k++) dst[k] = in->buf[keras_index(v, k)];
    rc = 0;
done:
    if (s >= 0) H5Sclose(s);
    if (t >= 0) H5Tclose(t);
    H5Dclose(d);
    return rc;
}

static int count_links(hid_t g, hsize_t *n) {
    H5G_info_t info;
    if (H5Gget_info(g, &info) < 0) return -1;
    *n = info.nlinks;
    return 0;
}

// 1 when loc has a group at name (components separated by '/', each checked in turn, as
// H5Lexists needs), 0 when not.
static int has_group(hid_t loc, const char *name) {
    char part[96];
    for (const char *slash = strchr(name, '/'); slash; slash = strchr(slash + 1, '/')) {
        if ((size_t)(slash - name) >= sizeof part) return 0;
        snprintf(part, sizeof part, "%.*s", (int)(slash - name), name);
        if (H5Lexists(loc, part, H5P_DEFAULT) <= 0) return 0;
    }
    if (H5Lexists(loc, name, H5P_DEFAULT) <= 0) return 0;
    // H5Oget_info's signature differs between libhdf5 1.10 and 1.12; opening it does not.
    hid_t o = H5Oopen(loc, name, H5P_DEFAULT);
    if (o < 0) return 0;
    int group = H5Iget_type(o) == H5I_GROUP;
    H5Oclose(o);
    return group;
}

// Keras 3: layers/<path>/vars/<i> (prefix: "layers", or tf_keras 2.13's name for it).
static int read_keras3(kh5_in *in, hid_t f, const char *prefix, const kh5_plan *p) {
    char where[192], list[96];
    hid_t top = H5Gopen2(f, prefix, H5P_DEFAULT);
    if (top < 0) return ht_fail(in->e, "%s: cannot open group %s", in->path, prefix);
    int rc = -1;
    for (int i = 0; i < p->n; i++) {
        const kh5_layer *K = &p->L[i];
        const char *lname = in->m->layers[K->l].name;
        hid_t g = has_group(top, K->path) ? H5Gopen2(top, K->path, H5P_DEFAULT) : -1;
        hid_t vars = g >= 0 && has_group(g, "vars") ? H5Gopen2(g, "vars", H5P_DEFAULT) : -1;
        if (g >= 0) H5Gclose(g);
        snprintf(where, sizeof where, "%s/%s/vars", prefix, K->path);
        if (in->pl) { // by name: a layer missing, or of other shapes, is left and listed
            const char *names[KH5_MAX_VARS];
            char nbuf[KH5_MAX_VARS][12];
            for (int v = 0; v < K->nv; v++) snprintf(nbuf[v], 12, "%d", v), names[v] = nbuf[v];
            int fits = vars < 0 ? 0 : partial_fits(in, vars, names, where, K);
            if (vars < 0 && load_partial_note(in->pl, "layer \"%s\" (%s): no %s in %s: left at "
                                              "its initial values", lname, K->cls, where,
                                              in->path)) {
                ht_fail(in->e, "out of memory");
                goto done;
            }
            if (fits < 0) {
                if (vars >= 0) H5Gclose(vars);
                goto done;
            }
            if (!fits) {
                if (vars >= 0) H5Gclose(vars);
                continue;
            }
        }
        if (vars < 0) {
            ht_fail(in->e, "%s: no %s for layer \"%s\" (%s number %d of the model; Keras 3 names "
                           "a layer's group by its class and that number): is the file of this "
                           "model?", in->path, where, lname, K->cls, K->pos + 1);
            goto done;
        }
        hsize_t n = 0;
        if (count_links(vars, &n) || n != (hsize_t)K->nv) {
            ht_fail(in->e, "%s: %s holds %llu variables where layer \"%s\" (%s) has %d (%s)",
                    in->path, where, (unsigned long long)n, lname, K->cls, K->nv,
                    var_list(K, list, sizeof list));
            H5Gclose(vars);
            goto done;
        }
        int bad = 0;
        for (int v = 0; v < K->nv && !bad; v++) {
            char dname[16], at[208];
            snprintf(dname, sizeof dname, "%d", v);
            snprintf(at, sizeof at, "%s/%d", where, v);
            if (H5Lexists(vars, dname, H5P_DEFAULT) <= 0) {
                ht_fail(in->e, "%s: no %s, the %s of layer \"%s\" (%s)", in->path, at,
                        K->v[v].name, lname, K->cls);
                bad = 1;
            } else {
                bad = read_var(in, vars, dname, at, K, &K->v[v]) != 0;
            }
        }
        H5Gclose(vars);
        if (bad) goto done;
    }
    // Weights of a layer this model lacks: the file is of another model (by name: ignored).
    hsize_t n;
    if (in->pl) {
        rc = 0;
        goto done;
    }
    if (count_links(top, &n)) goto done;
    for (hsize_t k = 0; k < n; k++) {
        char name[128];
        if (H5Lget_name_by_idx(top, ".", H5_INDEX_NAME, H5_ITER_INC, k, name, sizeof name,
                               H5P_DEFAULT) < 0)
            continue;
        int known = 0;
        const size_t len = strlen(name);
        for (int i = 0; i < p->n && !known; i++) // the layer's group, or its Sequential's
            known = !strcmp(name, p->L[i].path) ||
                    (!strncmp(name, p->L[i].path, len) && p->L[i].path[len] == '/');
        if (known || !has_group(top, name)) continue;
        hid_t g = H5Gopen2(top, name, H5P_DEFAULT);
        hsize_t nv = 0;
        int nested = has_group(g, "layers");
        if (has_group(g, "vars")) {
            hid_t vars = H5Gopen2(g, "vars", H5P_DEFAULT);
            if (count_links(vars, &nv)) nv = 0;
            H5Gclose(vars);
        }
        H5Gclose(g);
        if (nv || nested) {
            ht_fail(in->e, "%s: %s/%s holds %s that model %s does not have (its %d layers with "
                           "weights are %s ... %s)", in->path, prefix, name,
                    nested ? "a nested model's layers" : "the weights of a layer", in->m->name,
                    p->n, p->n ? p->L[0].path : "-", p->n ? p->L[p->n - 1].path : "-");
            goto done;
        }
    }
    rc = 0;
done:
    H5Gclose(top);
    return rc;
}

// Keras 2: layer_names on g, weight_names on each layer's group; matched by order among the
// layers with weights, as Keras's own loader matches them.
static int read_keras2(kh5_in *in, hid_t g, const char *gname, const kh5_plan *p) {
    kh5_strs names = {0}, wn = {0};
    int rc = -1, nw = 0;
    char list[96];
    int got = attr_strings(g, "layer_names", &names);
    if (got < 0) return ht_fail(in->e, "%s: %s's attribute layer_names is not a list of strings",
                                in->path, gname);
    // The layers with weights, in order: their index in names.
    int *with = ht_calloc((size_t)names.n + 1, sizeof *with, in->e);
    if (!with) goto done;
    for (int i = 0; i < names.n; i++) {
        if (!has_group(g, names.s[i])) {
            char q[80];
            ht_fail(in->e, "%s: layer_names lists \"%s\" but %s has no group of that name",
                    in->path, ht_escape(q, sizeof q, names.s[i], strlen(names.s[i])), gname);
            goto done;
        }
        hid_t lg = H5Gopen2(g, names.s[i], H5P_DEFAULT);
        int r = attr_strings(lg, "weight_names", &wn);
        H5Gclose(lg);
        if (r < 0) {
            ht_fail(in->e, "%s: layer \"%s\": its weight_names is not a list of strings",
                    in->path, names.s[i]);
            goto done;
        }
        if (r == 0 && wn.n > 0) with[nw++] = i;
        strs_free(&wn);
    }
    if (nw != p->n && !in->pl) {
        ht_fail(in->e, "%s: holds the weights of %d layers (%s%s%s) where model %s has %d "
                       "layers with weights (--by-name loads those of the same names)", in->path,
                nw, nw ? names.s[with[0]] : "none", nw > 1 ? " ... " : "",
                nw > 1 ? names.s[with[nw - 1]] : "", in->m->name, p->n);
        goto done;
    }
    for (int i = 0; i < p->n; i++) {
        const kh5_layer *K = &p->L[i];
        const char *lname = in->m->layers[K->l].name, *fname = NULL;
        if (in->pl) { // by name: the file's layer of this name, if it has weights
            for (int k = 0; k < nw && !fname; k++)
                if (!strcmp(names.s[with[k]], lname)) fname = names.s[with[k]];
            if (!fname) {
                if (load_partial_note(in->pl, "layer \"%s\" (%s): not in %s: left at its initial "
                                      "values", lname, K->cls, in->path)) {
                    ht_fail(in->e, "out of memory");
                    goto done;
                }
                continue;
            }
        } else {
            fname = names.s[with[i]];
        }
        hid_t lg = H5Gopen2(g, fname, H5P_DEFAULT);
        if (lg < 0 || attr_strings(lg, "weight_names", &wn) != 0) {
            if (lg >= 0) H5Gclose(lg);
            ht_fail(in->e, "%s: cannot read layer \"%s\"'s weight_names", in->path, fname);
            goto done;
        }
        if (in->pl && wn.n == K->nv) {
            char where[200];
            snprintf(where, sizeof where, "%s%s%s", gname[0] == '/' ? "" : gname,
                     gname[0] == '/' ? "" : "/", fname);
            const int fits = partial_fits(in, lg, (const char *const *)wn.s, where, K);
            if (fits <= 0) {
                H5Gclose(lg);
                strs_free(&wn);
                if (fits < 0) goto done;
                continue;
            }
        }
        if (wn.n != K->nv && in->pl && in->pl->skip_mismatch) {
            if (load_partial_note(in->pl, "layer \"%s\" (%s): %s's group holds %d weights, the "
                                  "layer %d: left at its initial values", lname, K->cls, fname,
                                  wn.n, K->nv)) {
                ht_fail(in->e, "out of memory");
                H5Gclose(lg);
                goto done;
            }
            H5Gclose(lg);
            strs_free(&wn);
            continue;
        }
        if (wn.n != K->nv) {
            ht_fail(in->e, "%s: the file's layer \"%s\" holds %d weights (%s%s) where layer "
                           "\"%s\" (%s) has %d (%s)", in->path, fname, wn.n, wn.n ? wn.s[0] : "",
                    wn.n > 1 ? ", ..." : "", lname, K->cls, K->nv, var_list(K, list, sizeof list));
            H5Gclose(lg);
            goto done;
        }
        int bad = 0;
        for (int v = 0; v < K->nv && !bad; v++) {
            char at[256];
            snprintf(at, sizeof at, "%s%s%s/%s", gname[0] == '/' ? "" : gname,
                     gname[0] == '/' ? "" : "/", fname, wn.s[v]);
            if (H5Lexists(lg, wn.s[v], H5P_DEFAULT) <= 0) {
                ht_fail(in->e, "%s: no %s, the %s of layer \"%s\" (%s)", in->path, at,
                        K->v[v].name, lname, K->cls);
                bad = 1;
            } else {
                bad = read_var(in, lg, wn.s[v], at, K, &K->v[v]) != 0;
            }
        }
        H5Gclose(lg);
        strs_free(&wn);
        if (bad) goto done;
    }
    rc = 0;
done:
    strs_free(&wn);
    strs_free(&names);
    free(with);
    return rc;
}

int kerash5_read_classes(const char *path, model *m, ht_error *e) {
    if (!has_h5_signature(path))
        return ht_fail(e, "%s: not an HDF5 file (Keras's weights are HDF5)", path);
    h5_quiet();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) {
        char why[160];
        return ht_fail(e, "%s: cannot open it as HDF5: %s", path, h5_why(why));
    }
    kh5_strs x = {0};
    int rc = 0;
    if (H5Aexists(f, "class_names") > 0) {
        rc = strs_read(f, "class_names", &x) < 0 || x.n != 1
                 ? ht_fail(e, "%s: its class_names attribute is not one string", path)
                 : model_classes_from_json(m, x.s[0], path, e);
        if (rc == 0) rc = 1;
    }
    strs_free(&x);
    H5Fclose(f);
    return rc;
}

int kerash5_load(const char *path, const model *m, float *params, ht_error *e) {
    return kerash5_load_partial(path, m, params, NULL, e);
}

int kerash5_load_partial(const char *path, const model *m, float *params, load_partial *pl,
                         ht_error *e) {
    kh5_plan p;
    if (plan_build(path, m, &p, e)) return -1;
    h5_quiet();
    int rc = -1;
    hid_t f = -1, fapl = -1, g = -1;
    float *tmp = NULL, *buf = NULL;
    unsigned char head[8] = {0};
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        ht_fail(e, "%s: %s", path, strerror(errno));
        goto done;
    }
    ssize_t got = read(fd, head, sizeof head);
    close(fd);
    if (got >= 4 && !memcmp(head, "PK\3\4", 4)) {
        ht_fail(e, "%s: a zip archive (a .keras model), not HDF5: its weights are the "
                   "model.weights.h5 inside it (unzip it and --load that)", path);
        goto done;
    }
    if (!has_h5_signature(path)) {
        ht_fail(e, "%s: not an HDF5 file (Keras's weights are HDF5: model.save_weights's "
                   ".weights.h5 or .h5, or a full model .h5)", path);
        goto done;
    }
    // Closing the file closes whatever a failure left open in it.
    if ((fapl = H5Pcreate(H5P_FILE_ACCESS)) < 0 ||
        H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG) < 0 ||
        (f = H5Fopen(path, H5F_ACC_RDONLY, fapl)) < 0) {
        char why[160];
        ht_fail(e, "%s: cannot open it as HDF5: %s", path, h5_why(why));
        goto done;
    }
    if (!(tmp = ht_calloc(m->n_params + 1, sizeof *tmp, e)) ||
        !(buf = ht_malloc(p.max_n + 1, sizeof *buf, e)))
        goto done;
    if (pl) memcpy(tmp, params, m->n_params * sizeof *tmp); // what is left keeps its values
    kh5_in in = {path, m, tmp, buf, e, pl};
    if (has_group(f, "model_weights")) {
        g = H5Gopen2(f, "model_weights", H5P_DEFAULT);
        rc = read_keras2(&in, g, "model_weights", &p);
    } else if (H5Aexists(f, "layer_names") > 0 || H5Aexists(f, "layer_names0") > 0) {
        rc = read_keras2(&in, f, "/", &p);
    } else if (has_group(f, "layers")) {
        rc = read_keras3(&in, f, "layers", &p);
    } else if (has_group(f, "_layer_checkpoint_dependencies")) {
        rc = read_keras3(&in, f, "_layer_checkpoint_dependencies", &p);
    } else {
        ht_fail(e, "%s: an HDF5 file but not Keras weights: neither Keras 3's layers/<layer>/vars "
                   "groups nor Keras 2's layer_names attribute (nor a model_weights group)", path);
    }
    if (rc == 0) {
        // A tensor without a Keras counterpart (a count of updates) starts anew.
        for (int i = 0; i < p.n; i++)
            if (p.L[i].count && !pl) tmp[p.L[i].count->off] = 0;
        memcpy(params, tmp, m->n_params * sizeof *tmp);
    }
done:
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    if (fapl >= 0) H5Pclose(fapl);
    free(tmp);
    free(buf);
    plan_free(&p);
    return rc;
}
