// Winograd F(2x2,3x3), F(4x4,3x3), F(2x2,5x5) and F(4x4,5x5) on channels-last tensors (see
// winograd.h): the weights' transform and the weight gradient's way back from the transformed
// domain, in double, once per batch. The per-sample stages are wino_tiles.c's.
#include "nn/winograd.h"

static const double G2[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double G4[6][3] = {{1.0 / 4, 0, 0},
                                {-1.0 / 6, -1.0 / 6, -1.0 / 6},
                                {-1.0 / 6, 1.0 / 6, -1.0 / 6},
                                {1.0 / 24, 1.0 / 12, 1.0 / 6},
                                {1.0 / 24, -1.0 / 12, 1.0 / 6},
                                {0, 0, 1}};

static const double G5[6][5] = {{1.0 / 4, 0, 0, 0, 0},
                                {-1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6, -1.0 / 6},
                                {-1.0 / 6, 1.0 / 6, -1.0 / 6, 1.0 / 6, -1.0 / 6},
                                {1.0 / 24, 1.0 / 12, 1.0 / 6, 1.0 / 3, 2.0 / 3},
                                {1.0 / 24, -1.0 / 12, 1.0 / 6, -1.0 / 3, 2.0 / 3},
                                {0, 0, 0, 0, 1}};

static const double G45[8][5] = {{1, 0, 0, 0, 0},
                                 {-2.0 / 9, -2.0 / 9, -2.0 / 9, -2.0 / 9, -2.0 / 9},
                                 {-2.0 / 9, 2.0 / 9, -2.0 / 9, 2.0 / 9, -2.0 / 9},
                                 {1.0 / 90, 1.0 / 45, 2.0 / 45, 4.0 / 45, 8.0 / 45},
                                 {1.0 / 90, -1.0 / 45, 2.0 / 45, -4.0 / 45, 8.0 / 45},
                                 {32.0 / 45, 16.0 / 45, 8.0 / 45, 4.0 / 45, 2.0 / 45},
                                 {32.0 / 45, -16.0 / 45, 8.0 / 45, -4.0 / 45, 2.0 / 45},
                                 {0, 0, 0, 0, 1}};

// F(m,r)'s G (a x r, a = m + r - 1) into G.
static void g_table(int m, int r, double G[8][5]) {
    for (int i = 0; i < wino_alpha(m, r); i++) {
        const double *row = r == 5 ? (m == 2 ? G5[i] : G45[i]) : m == 2 ? G2[i] : G4[i];
        for (int y = 0; y < r; y++) G[i][y] = row[y];
    }
}

// Input channels a pass of wino_weights transforms side by side, one to a vector lane: each
// lane's arithmetic is the scalar transform's, operation for operation, so the bits are too.
#define WW_LANES 8

void wino_weights(float *U, int ldu, const float *w, int C, int OC, int m, int r, int flip) {
    const int a = wino_alpha(m, r), n_in = flip ? OC : C, n_out = flip ? C : OC, rr = r * r;
    for (int xi = 0; xi < a * a; xi++)
        for (int i = 0; i < n_in; i++) {
            float *row = U + ((size_t)xi * n_in + i) * ldu;
            for (int j = n_out; j < ldu; j++) row[j] = 0.0f;
        }
    double G[8][5];
    g_table(m, r, G);
    for (int oc = 0; oc < OC; oc++)
        for (int c0 = 0; c0 < C; c0 += WW_LANES) {
            const int nl = C - c0 < WW_LANES ? C - c0 : WW_LANES;
            double g[5][5][WW_LANES], t[8][5][WW_LANES];
            for (int l = 0; l < WW_LANES; l++) {
                const float *k = w + ((size_t)oc * C + c0 + (l < nl ? l : 0)) * rr;
                for (int y = 0; y < r; y++)
                    for (int x = 0; x < r; x++)
                        g[y][x][l] = flip ? k[(r - 1 - y) * r + r - 1 - x] : k[y * r + x];
            }
            for (int i = 0; i < a; i++) // t = G g
                for (int x = 0; x < r; x++) {
                    double acc[WW_LANES] = {0};
                    for (int y = 0; y < r; y++)
                        for (int l = 0; l < WW_LANES; l++) acc[l] += G[i][y] * g[y][x][l];
                    for (int l = 0; l < WW_LANES; l++) t[i][x][l] = acc[l];
                }
            for (int i = 0; i < a; i++) // U = t G^T
                for (int j = 0; j < a; j++) {
                    double u[WW_LANES] = {0};
                    for (int x = 0; x < r; x++)
                        for (int l = 0; l < WW_LANES; l++) u[l] += t[i][x][l] * G[j][x];
                    float *dst = U + (size_t)(i * a + j) * n_in * ldu;
                    for (int l = 0; l < nl; l++) {
                        const int c = c0 + l, row = flip ? oc : c, col = flip ? c : oc;
                        dst[(size_t)row * ldu + col] = (float)u[l];
                    }
                }
        }
}

void wino_dw_finish(float *dw, const double *dU, size_t stride, int n, int ldd, int C, int OC,
                    int m, int r) {
    const int a = wino_alpha(m, r), rr = r * r;
    const size_t plane = (size_t)C * ldd;
    double G[8][5];
    g_table(m, r, G);
    // Output channels side by side, one to a lane, each with the scalar arithmetic.
    for (int c = 0; c < C; c++)
        for (int oc0 = 0; oc0 < OC; oc0 += WW_LANES) {
            const int nl = OC - oc0 < WW_LANES ? OC - oc0 : WW_LANES;
            double s[8][8][WW_LANES], t[8][5][WW_LANES];
            for (int xi = 0; xi < a * a; xi++) {
                const double *p = dU + xi * plane + (size_t)c * ldd + oc0;
                double acc[WW_LANES] = {0};
                for (int b = 0; b < n; b++)
                    for (int l = 0; l < WW_LANES; l++)
                        acc[l] += p[(size_t)b * stride + (l < nl ? l : 0)];
                for (int l = 0; l < WW_LANES; l++) s[xi / a][xi % a][l] = acc[l];
            }
            for (int i = 0; i < a; i++) // t = s G
                for (int k = 0; k < r; k++) {
                    double acc[WW_LANES] = {0};
                    for (int j = 0; j < a; j++)
                        for (int l = 0; l < WW_LANES; l++) acc[l] += s[i][j][l] * G[j][k];
                    for (int l = 0; l < WW_LANES; l++) t[i][k][l] = acc[l];
                }
            for (int k = 0; k < r; k++) // G^T t
                for (int q = 0; q < r; q++) {
                    double acc[WW_LANES] = {0};
                    for (int i = 0; i < a; i++)
                        for (int l = 0; l < WW_LANES; l++) acc[l] += G[i][k] * t[i][q][l];
                    for (int l = 0; l < nl; l++)
                        dw[((size_t)(oc0 + l) * C + c) * rr + k * r + q] += (float)acc[l];
                }
        }
}

