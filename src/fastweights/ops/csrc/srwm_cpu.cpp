// Fused SRWM recurrence on CPU: the forward and the reversal backward of ops/srwm_autograd.py, with the
// time loop inside compiled code and one (batch, head) fast-weight matrix at a time (parallel over
// batch x heads with at::parallel_for). Irie et al. 2022, Eq. 5-8; see ops/srwm.py for the math.
//
// Layout: x [B, T, H, E] and y [B, T, H, O] as the ops take them (read and written in place, no
// sequence-major copies), w0 / w [B, H, E, C] (C = O + 2E + 4 columns y | q | k | beta); saved per
// (b, h) = n: act [N, T, 2E + 4] (q | k after softmax, beta after sigmoid), diff [N, T, C]
// (d_t = (q_t - k_t) W_{t-1}).
//
// Inside, each matrix lives in an aligned copy whose rows are padded with zero columns to a whole number
// of SIMD vectors (GCC/Clang vector extensions: 64 bytes with AVX-512, else 32), so every sweep is whole
// vectors. The forward's two sweeps per step are column-blocked (the block's accumulators stay in
// registers over the rows); the backward's sweeps are row-major (two rows at a time in the fused sweep).
// float32 uses a vectorised exp (degree-6 polynomial, ~1 ulp); float64 uses std::exp.
#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <sys/mman.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <type_traits>

namespace {

// One SIMD register: 64 bytes with AVX-512, else 32 (AVX2; elsewhere the compiler splits or emulates).
#ifdef __AVX512F__
constexpr int kBytes = 64;
#else
constexpr int kBytes = 32;
#endif

template <typename T>
struct Simd;
template <>
struct Simd<float> {
  typedef float v __attribute__((vector_size(kBytes), __may_alias__));
  typedef int iv __attribute__((vector_size(kBytes), __may_alias__));
  static constexpr int64_t L = kBytes / 4;
};
template <>
struct Simd<double> {
  typedef double v __attribute__((vector_size(kBytes), __may_alias__));
  static constexpr int64_t L = kBytes / 8;
};

// A zero-filled scratch array aligned to one SIMD register.
template <typename T>
struct Buf {
  T* p;
  explicit Buf(int64_t n) {
    const size_t bytes = ((static_cast<size_t>(n) * sizeof(T) + kBytes - 1) / kBytes) * kBytes + kBytes;
    p = static_cast<T*>(std::aligned_alloc(kBytes, bytes));
    TORCH_CHECK(p != nullptr, "srwm_cpu: out of memory");
    std::memset(p, 0, bytes);
  }
  ~Buf() { std::free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

template <typename T>
inline typename Simd<T>::v& V(T* p) {
  return *reinterpret_cast<typename Simd<T>::v*>(p);
}

template <typename T>
inline T hsum(typename Simd<T>::v a) {
  T s = 0;
  for (int64_t l = 0; l < Simd<T>::L; ++l) s += a[l];
  return s;
}

// Asks the kernel to back a fresh output's whole 2 MiB pages with transparent huge pages (Linux, THP in
// "madvise" mode): the kernel writes its large outputs (act, diff, y, g_x: tens of MB per call) first,
// and taking them one 4 KiB page fault at a time cost ~40% of the forward on a virtual machine. Only the
// 2 MiB-aligned part inside the tensor is advised; a no-op where THP is off or unsupported.
inline torch::Tensor huge_pages(torch::Tensor t) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t(1) << 21;
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(t.data_ptr()) + kHuge - 1) & ~(kHuge - 1);
  const uintptr_t hi = (reinterpret_cast<uintptr_t>(t.data_ptr()) + t.nbytes()) & ~(kHuge - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_HUGEPAGE);
#endif
  return t;
}

// exp of x <= 0 (softmax after subtracting the max): float32 vectorised, float64 scalar std::exp.
inline void exp_nonpositive(float* v, int64_t n) {  // n a whole number of vectors, v aligned
  typedef Simd<float>::v vf;
  typedef Simd<float>::iv vi;
  for (int64_t i = 0; i < n; i += Simd<float>::L) {
    vf x = V(v + i);
    x = x < -87.0f ? vf{} - 87.0f : x;
    const vf z = x * 1.44269504088896341f - 0.5f;  // round(x log2 e) for x <= 0
    const vi ni = __builtin_convertvector(z, vi);  // truncation towards zero
    const vf n_f = __builtin_convertvector(ni, vf);
    const vf r = (x - n_f * 0.693145751953125f) - n_f * 1.428606765330187045e-06f;
    vf p = vf{} + 1.0f / 720;
    p = p * r + 1.0f / 120;
    p = p * r + 1.0f / 24;
    p = p * r + 1.0f / 6;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const vi bits = (ni + 127) << 23;
    V(v + i) = p * (vf)bits;
  }
}
inline void exp_nonpositive(double* v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) v[i] = std::exp(v[i]);
}

// Softmax of src[0:n] into dst[0:n]; tmp holds round_up(n, L) values.
template <typename T>
void softmax(const T* src, T* dst, T* tmp, int64_t n) {
  const int64_t np = (n + Simd<T>::L - 1) / Simd<T>::L * Simd<T>::L;
  T m = src[0];
  for (int64_t i = 1; i < n; ++i) m = src[i] > m ? src[i] : m;
  for (int64_t i = 0; i < n; ++i) tmp[i] = src[i] - m;
  for (int64_t i = n; i < np; ++i) tmp[i] = T(-1000);
  exp_nonpositive(tmp, np);
  T s = 0;
  for (int64_t i = 0; i < n; ++i) s += tmp[i];
  const T inv = T(1) / s;
  for (int64_t i = 0; i < n; ++i) dst[i] = tmp[i] * inv;
}

// Per-column learning rate of step t: beta_t[rate(j)] (0: y, 1: q, 2: k, 3: beta columns), 0 on padding.
template <typename T>
void column_rates(const T* beta, T* out, int64_t o, int64_t e, int64_t c) {
  const int64_t ends[4] = {o, o + e, o + 2 * e, c};
  int64_t j = 0;
  for (int r = 0; r < 4; ++r)
    for (; j < ends[r]; ++j) out[j] = beta[r];
}

// Forward, column-blocked sweeps over a block of NB vectors at column j0 (W: e rows of P values).
// d[j] = sum_i qmk[i] W[i][j]; u[j] = d[j] * rate[j].
template <typename T, int NB>
inline void sweep_diff(const T* __restrict__ w, int64_t P, int64_t e, const T* __restrict__ qmk,
                       T* __restrict__ d, T* __restrict__ u, const T* __restrict__ rate, int64_t j0) {
  typedef typename Simd<T>::v vt;
  constexpr int64_t L = Simd<T>::L;
  vt a0[NB], a1[NB];
  for (int b = 0; b < NB; ++b) a0[b] = a1[b] = vt{};
  int64_t i = 0;
  for (; i + 1 < e; i += 2) {
    const T* r0 = w + i * P + j0;
    const T* r1 = r0 + P;
    for (int b = 0; b < NB; ++b) {
      a0[b] += qmk[i] * *reinterpret_cast<const vt*>(r0 + b * L);
      a1[b] += qmk[i + 1] * *reinterpret_cast<const vt*>(r1 + b * L);
    }
  }
  if (i < e)
    for (int b = 0; b < NB; ++b) a0[b] += qmk[i] * *reinterpret_cast<const vt*>(w + i * P + j0 + b * L);
  for (int b = 0; b < NB; ++b) {
    const vt s = a0[b] + a1[b];
    V(d + j0 + b * L) = s;
    V(u + j0 + b * L) = s * *reinterpret_cast<const vt*>(rate + j0 + b * L);
  }
}

// W[i][j] += k[i] u[j], fused with the next projection p[j] = sum_i xn[i] W[i][j] (xn may be null) and,
// when READ, the next read pr[j] = sum_i xr[i] W[i][j] (callers use its y columns only).
template <typename T, int NB, bool READ>
inline void sweep_update(T* __restrict__ w, int64_t P, int64_t e, const T* __restrict__ k,
                         const T* __restrict__ u, const T* __restrict__ xn, T* __restrict__ p,
                         const T* __restrict__ xr, T* __restrict__ pr, int64_t j0) {
  typedef typename Simd<T>::v vt;
  constexpr int64_t L = Simd<T>::L;
  vt ub[NB], a0[NB], a1[NB], ar[NB];
  for (int b = 0; b < NB; ++b) {
    ub[b] = *reinterpret_cast<const vt*>(u + j0 + b * L);
    a0[b] = a1[b] = ar[b] = vt{};
  }
  int64_t i = 0;
  for (; i + 1 < e; i += 2) {
    T* r0 = w + i * P + j0;
    T* r1 = r0 + P;
    const T x0 = xn ? xn[i] : T(0), x1 = xn ? xn[i + 1] : T(0);
    for (int b = 0; b < NB; ++b) {
      const vt v0 = V(r0 + b * L) + k[i] * ub[b];
      const vt v1 = V(r1 + b * L) + k[i + 1] * ub[b];
      V(r0 + b * L) = v0;
      V(r1 + b * L) = v1;
      a0[b] += x0 * v0;
      a1[b] += x1 * v1;
      if (READ) ar[b] += xr[i] * v0 + xr[i + 1] * v1;
    }
  }
  if (i < e) {
    T* r0 = w + i * P + j0;
    const T x0 = xn ? xn[i] : T(0);
    for (int b = 0; b < NB; ++b) {
      const vt v0 = V(r0 + b * L) + k[i] * ub[b];
      V(r0 + b * L) = v0;
      a0[b] += x0 * v0;
      if (READ) ar[b] += xr[i] * v0;
    }
  }
  for (int b = 0; b < NB; ++b) {
    V(p + j0 + b * L) = a0[b] + a1[b];
    if (READ) V(pr + j0 + b * L) = ar[b];
  }
}

// Runs f(integral_constant<NB>, j0) over the nv vectors of a row: blocks of MAX vectors, then the rest.
template <int MAX, typename F>
inline void over_blocks(int64_t nv, int64_t L, F&& f) {
  int64_t v = 0;
  for (; v + MAX <= nv; v += MAX) f(std::integral_constant<int, MAX>{}, v * L);
  switch (nv - v) {
    case 3: if constexpr (MAX > 3) f(std::integral_constant<int, 3>{}, v * L); break;
    case 2: if constexpr (MAX > 2) f(std::integral_constant<int, 2>{}, v * L); break;
    case 1: if constexpr (MAX > 1) f(std::integral_constant<int, 1>{}, v * L); break;
    default: break;
  }
}

// Column block of the update sweep, in vectors: it keeps 3 NB accumulators plus the row broadcasts in
// registers, which spill beyond NB = 2 with AVX2's 16 vector registers (AVX-512 has 32).
#ifdef __AVX512F__
constexpr int kUpdateBlock = 4;
#else
constexpr int kUpdateBlock = 2;
#endif

// p = x W over the first n columns (the first step's projection).
template <typename T>
void project(const T* w, int64_t P, int64_t e, const T* x, T* p, int64_t n) {
  for (int64_t j = 0; j < n; ++j) p[j] = 0;
  for (int64_t i = 0; i < e; ++i)
    for (int64_t j = 0; j < n; ++j) p[j] += x[i] * w[i * P + j];
}

template <typename T>
void load_padded(const T* src, T* dst, int64_t e, int64_t c, int64_t P) {
  for (int64_t i = 0; i < e; ++i) std::memcpy(dst + i * P, src + i * c, c * sizeof(T));
}
template <typename T>
void store_unpadded(const T* src, T* dst, int64_t e, int64_t c, int64_t P) {
  for (int64_t i = 0; i < e; ++i) std::memcpy(dst + i * c, src + i * P, c * sizeof(T));
}

// xr / yr: the read-only stream (y_read_t = xr_t W^y_{t-1}), or null. Step t of x / xr is at t * xs, of
// y / yr at t * ys (the [B, T, H, .] layout: xs = H E, ys = H O).
template <typename T>
void forward_one(const T* __restrict__ x, const T* __restrict__ xr, T* __restrict__ w_io, T* __restrict__ y,
                 T* __restrict__ yr, T* __restrict__ act, T* __restrict__ diff, int64_t steps, int64_t e,
                 int64_t c, int64_t o, int64_t xs, int64_t ys) {
  constexpr int64_t L = Simd<T>::L;
  const int64_t P = (c + L - 1) / L * L, nv = P / L, na = 2 * e + 4;
  const int64_t nvr = (o + L - 1) / L;  // vectors holding the y columns
  if (steps == 0) return;  // w_io already holds w0
  Buf<T> wb(e * P), pb(P), prb(P), db(P), ub(P), rb(P), qb(e), tb(e + L);
  T* w = wb.p;
  T* p = pb.p;
  T* pr = prb.p;
  T* d = db.p;
  T* u = ub.p;
  T* rate = rb.p;
  T* qmk = qb.p;
  load_padded(w_io, w, e, c, P);
  project(w, P, e, x, p, P);
  if (xr) project(w, P, e, xr, pr, o);
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t j = 0; j < o; ++j) y[t * ys + j] = p[j];
    if (xr)
      for (int64_t j = 0; j < o; ++j) yr[t * ys + j] = pr[j];
    T* a = act + t * na;
    softmax(p + o, a, tb.p, e);
    softmax(p + o + e, a + e, tb.p, e);
    for (int64_t j = 0; j < 4; ++j) a[2 * e + j] = T(1) / (T(1) + std::exp(-p[o + 2 * e + j]));
    for (int64_t i = 0; i < e; ++i) qmk[i] = a[i] - a[e + i];
    column_rates(a + 2 * e, rate, o, e, c);
    over_blocks<4>(nv, L, [&](auto nb, int64_t j0) { sweep_diff<T, decltype(nb)::value>(w, P, e, qmk, d, u, rate, j0); });
    std::memcpy(diff + t * c, d, c * sizeof(T));
    const bool next = t + 1 < steps;
    const T* xn = next ? x + (t + 1) * xs : nullptr;
    const T* xrn = xr && next ? xr + (t + 1) * xs : nullptr;
    over_blocks<kUpdateBlock>(nv, L, [&](auto nb, int64_t j0) {
      constexpr int NB = decltype(nb)::value;
      if (xrn && j0 < nvr * L)
        sweep_update<T, NB, true>(w, P, e, a + e, u, xn, p, xrn, pr, j0);
      else
        sweep_update<T, NB, false>(w, P, e, a + e, u, xn, p, nullptr, nullptr, j0);
    });
  }
  store_unpadded(w, w_io, e, c, P);
}

// The read stream's part of a backward row (its y columns: the first nvr vectors): g_xr[i] += g_yr . W[i]
// and G[i] += xr[i] g_yr, before the row's own update.
template <typename T, int R>
inline void read_rows(const T* __restrict__ w, T* __restrict__ g, int64_t P, int64_t nvr, int64_t i,
                      const T* __restrict__ gyr, const T* __restrict__ xr, T* __restrict__ gxr) {
  typedef typename Simd<T>::v vt;
  constexpr int64_t L = Simd<T>::L;
  vt s[R];
  for (int r = 0; r < R; ++r) s[r] = vt{};
  for (int64_t v = 0; v < nvr; ++v) {
    const vt gj = *reinterpret_cast<const vt*>(gyr + v * L);
    for (int r = 0; r < R; ++r) {
      s[r] += gj * *reinterpret_cast<const vt*>(w + (i + r) * P + v * L);
      T* gr = g + (i + r) * P + v * L;
      V(gr) = V(gr) + xr[i + r] * gj;
    }
  }
  for (int r = 0; r < R; ++r) gxr[i + r] = hsum<T>(s[r]);
}

// One or two rows of the backward's fused sweep (R rows from row i): g_x[i] = g_proj . W_{t-1}[i];
// G[i] += (q - k)[i] g_d + x[i] g_proj; then, when undo: W_{t-1}[i] -= k_{t-1}[i] u_{t-1},
// g_k[i] = G[i] . u_{t-1}, g_u += k_{t-1}[i] G[i].
template <typename T, int R>
inline void fused_rows(T* __restrict__ w, T* __restrict__ g, int64_t P, int64_t nv, int64_t i,
                       const T* __restrict__ gproj, const T* __restrict__ gd, const T* __restrict__ u,
                       T* __restrict__ gu, const T* __restrict__ qmk, const T* __restrict__ xt,
                       const T* __restrict__ kp, T* __restrict__ gx, T* __restrict__ gk) {
  typedef typename Simd<T>::v vt;
  constexpr int64_t L = Simd<T>::L;
  vt sx[R], sk[R];
  T qi[R], xi[R], ki[R];
  for (int r = 0; r < R; ++r) {
    sx[r] = sk[r] = vt{};
    qi[r] = qmk[i + r];
    xi[r] = xt[i + r];
    ki[r] = kp ? kp[i + r] : T(0);
  }
  for (int64_t v = 0; v < nv; ++v) {
    const int64_t j = v * L;
    const vt gpj = *reinterpret_cast<const vt*>(gproj + j);
    const vt gdj = *reinterpret_cast<const vt*>(gd + j);
    if (kp) {
      const vt uj = *reinterpret_cast<const vt*>(u + j);
      vt guj = V(gu + j);
      for (int r = 0; r < R; ++r) {
        T* wr = w + (i + r) * P + j;
        T* gr = g + (i + r) * P + j;
        const vt wv = V(wr);
        const vt gv = V(gr) + qi[r] * gdj + xi[r] * gpj;
        sx[r] += gpj * wv;
        V(gr) = gv;
        V(wr) = wv - ki[r] * uj;
        sk[r] += gv * uj;
        guj += ki[r] * gv;
      }
      V(gu + j) = guj;
    } else {
      for (int r = 0; r < R; ++r) {
        const vt wv = *reinterpret_cast<const vt*>(w + (i + r) * P + j);
        T* gr = g + (i + r) * P + j;
        sx[r] += gpj * wv;
        V(gr) = V(gr) + qi[r] * gdj + xi[r] * gpj;
      }
    }
  }
  for (int r = 0; r < R; ++r) {
    gx[i + r] = hsum<T>(sx[r]);
    gk[i + r] = hsum<T>(sk[r]);
  }
}

// W_{t-1} = W_t - k_t (x) u_t row by row, with g_k = G u_t and g_u = k_t G (the last step only).
template <typename T>
void undo_all(T* w, const T* g, int64_t P, int64_t e, const T* u, const T* k, T* gu, T* gk) {
  for (int64_t j = 0; j < P; ++j) gu[j] = 0;
  for (int64_t i = 0; i < e; ++i) {
    T s = 0;
    for (int64_t j = 0; j < P; ++j) {
      w[i * P + j] -= k[i] * u[j];
      s += g[i * P + j] * u[j];
      gu[j] += k[i] * g[i * P + j];
    }
    gk[i] = s;
  }
}

// xr / gyr / gxr: the read-only stream, its output gradient and its input gradient, or null; strides as
// for forward_one (x, xr, gx, gxr: xs; gy, gyr: ys).
template <typename T>
void backward_one(const T* __restrict__ x, const T* __restrict__ xr, const T* __restrict__ act,
                  const T* __restrict__ diff, const T* __restrict__ w_final, const T* __restrict__ g_w,
                  T* __restrict__ g_out, const T* __restrict__ gy, const T* __restrict__ gyr, T* __restrict__ gx,
                  T* __restrict__ gxr, int64_t steps, int64_t e, int64_t c, int64_t o, int64_t xs, int64_t ys) {
  typedef typename Simd<T>::v vt;
  constexpr int64_t L = Simd<T>::L;
  const int64_t P = (c + L - 1) / L * L, nv = P / L, na = 2 * e + 4, nvr = (o + L - 1) / L;
  if (steps == 0) {  // no step: dL/dW0 = dL/dW_final
    std::memcpy(g_out, g_w, e * c * sizeof(T));
    return;
  }
  Buf<T> wb(e * P), gb(e * P), ub(P), gub(P), gdb(P), gpb(P), gyrb(P), gkb(e), gqb(e), qb(e);
  T* gyr_pad = gyrb.p;
  T* w = wb.p;
  T* g = gb.p;
  T* u = ub.p;
  T* gu = gub.p;
  T* gd = gdb.p;
  T* gproj = gpb.p;
  T* gk = gkb.p;
  T* gqmk = gqb.p;
  T* qmk = qb.p;
  load_padded(w_final, w, e, c, P);
  load_padded(g_w, g, e, c, P);
  const int64_t ends[5] = {0, o, o + e, o + 2 * e, c};
  auto by_rates = [&](const T* __restrict__ src, T* __restrict__ dst, const T* beta) {  // dst = src * rate
    for (int r = 0; r < 4; ++r)
      for (int64_t j = ends[r]; j < ends[r + 1]; ++j) dst[j] = src[j] * beta[r];
  };
  auto written = [&](int64_t t) {  // u_t = d_t * beta_t per column (u's padding stays 0)
    by_rates(diff + t * c, u, act + t * na + 2 * e);
    if (t > 0) {  // the step before is read next, backwards in time: fetch its rows ahead
      const char* dn = reinterpret_cast<const char*>(diff + (t - 1) * c);
      for (int64_t b = 0; b < static_cast<int64_t>(c * sizeof(T)); b += 64) __builtin_prefetch(dn + b);
      const char* an = reinterpret_cast<const char*>(act + (t - 1) * na);
      for (int64_t b = 0; b < static_cast<int64_t>(na * sizeof(T)); b += 64) __builtin_prefetch(an + b);
    }
  };
  written(steps - 1);
  undo_all(w, g, P, e, u, act + (steps - 1) * na + e, gu, gk);
  for (int64_t t = steps - 1; t >= 0; --t) {
    const T* a = act + t * na;
    const T* q = a;
    const T* k = a + e;
    const T* beta = a + 2 * e;
    const T* d = diff + t * c;
    by_rates(gu, gd, beta);  // gd's padding stays 0
    T gbeta[4];
    for (int r = 0; r < 4; ++r) {
      T s = 0;
      for (int64_t j = ends[r]; j < ends[r + 1]; ++j) s += gu[j] * d[j];
      gbeta[r] = s;
    }
    for (int64_t i = 0; i < e; ++i) {  // g_(q-k) = g_d W_{t-1}^T
      const T* wi = w + i * P;
      vt s0 = vt{}, s1 = vt{};
      int64_t v = 0;
      for (; v + 1 < nv; v += 2) {
        s0 += *reinterpret_cast<const vt*>(gd + v * L) * *reinterpret_cast<const vt*>(wi + v * L);
        s1 += *reinterpret_cast<const vt*>(gd + (v + 1) * L) * *reinterpret_cast<const vt*>(wi + (v + 1) * L);
      }
      if (v < nv) s0 += *reinterpret_cast<const vt*>(gd + v * L) * *reinterpret_cast<const vt*>(wi + v * L);
      gqmk[i] = hsum<T>(s0 + s1);
      qmk[i] = q[i] - k[i];
    }
    T dot_q = 0, dot_k = 0;  // softmax backward of q (gradient g_qmk) and k (gradient g_k - g_qmk)
    for (int64_t i = 0; i < e; ++i) {
      dot_q += gqmk[i] * q[i];
      dot_k += (gk[i] - gqmk[i]) * k[i];
    }
    for (int64_t j = 0; j < o; ++j) gproj[j] = gy[t * ys + j];
    for (int64_t i = 0; i < e; ++i) {
      gproj[o + i] = q[i] * (gqmk[i] - dot_q);
      gproj[o + e + i] = k[i] * ((gk[i] - gqmk[i]) - dot_k);
    }
    for (int64_t r = 0; r < 4; ++r) gproj[o + 2 * e + r] = gbeta[r] * beta[r] * (T(1) - beta[r]);
    const bool prev = t > 0;
    if (prev) {
      written(t - 1);
      for (int64_t j = 0; j < P; ++j) gu[j] = 0;
    }
    const T* kp = prev ? act + (t - 1) * na + e : nullptr;
    const T* xt = x + t * xs;
    T* gxt = gx + t * xs;
    if (xr) {  // before the fused sweep undoes W_{t-1}
      std::memcpy(gyr_pad, gyr + t * ys, o * sizeof(T));
      const T* xrt = xr + t * xs;
      T* gxrt = gxr + t * xs;
      int64_t i = 0;
      for (; i + 1 < e; i += 2) read_rows<T, 2>(w, g, P, nvr, i, gyr_pad, xrt, gxrt);
      if (i < e) read_rows<T, 1>(w, g, P, nvr, i, gyr_pad, xrt, gxrt);
    }
    int64_t i = 0;
    for (; i + 1 < e; i += 2) fused_rows<T, 2>(w, g, P, nv, i, gproj, gd, u, gu, qmk, xt, kp, gxt, gk);
    if (i < e) fused_rows<T, 1>(w, g, P, nv, i, gproj, gd, u, gu, qmk, xt, kp, gxt, gk);
  }
  store_unpadded(g, g_out, e, c, P);
}

// x [B, T, H, E], x_read [B, T, H, E] (used when read), w0 [B, H, E, C] -> {y [B, T, H, O],
// y_read (empty if none), act [B H, T, 2E + 4], diff [B H, T, C], w_final [B, H, E, C]}.
std::vector<torch::Tensor> srwm_forward(torch::Tensor x, torch::Tensor x_read, bool read, torch::Tensor w0,
                                        int64_t o) {
  TORCH_CHECK(x.dim() == 4 && w0.dim() == 4, "srwm_forward: x [B, T, H, E], w0 [B, H, E, C]");
  TORCH_CHECK(!read || x_read.sizes() == x.sizes(), "srwm_forward: x_read must match x");
  x = x.contiguous();
  x_read = x_read.contiguous();
  auto w = w0.contiguous().clone();
  const int64_t nb = x.size(0), steps = x.size(1), nh = x.size(2), e = x.size(3), c = w.size(3);
  const int64_t n = nb * nh, xs = nh * e, ys = nh * o;
  auto y = huge_pages(torch::empty({nb, steps, nh, o}, x.options()));
  auto y_read = huge_pages(read ? torch::empty({nb, steps, nh, o}, x.options()) : torch::empty({0}, x.options()));
  auto act = huge_pages(torch::empty({n, steps, 2 * e + 4}, x.options()));
  auto diff = huge_pages(torch::empty({n, steps, c}, x.options()));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "srwm_forward", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* xrp = read ? x_read.data_ptr<scalar_t>() : nullptr;
    scalar_t* wp = w.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    scalar_t* yrp = read ? y_read.data_ptr<scalar_t>() : nullptr;
    scalar_t* ap = act.data_ptr<scalar_t>();
    scalar_t* dp = diff.data_ptr<scalar_t>();
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t bi = i / nh, hi = i % nh;
        const int64_t xo = bi * steps * xs + hi * e, yo = bi * steps * ys + hi * o;
        forward_one<scalar_t>(xp + xo, read ? xrp + xo : nullptr, wp + i * e * c, yp + yo,
                              read ? yrp + yo : nullptr, ap + i * steps * (2 * e + 4), dp + i * steps * c, steps,
                              e, c, o, xs, ys);
      }
    });
  });
  return {y, y_read, act, diff, w};
}

// -> {g_x [B, T, H, E], g_x_read (empty without a read stream), g_w0 [B, H, E, C]}; g_y [B, T, H, O];
// g_y_read is empty without a read stream.
std::vector<torch::Tensor> srwm_backward(torch::Tensor x, torch::Tensor x_read, bool read, torch::Tensor act,
                                         torch::Tensor diff, torch::Tensor w_final, torch::Tensor g_y,
                                         torch::Tensor g_y_read, torch::Tensor g_w) {
  x = x.contiguous();
  x_read = x_read.contiguous();
  act = act.contiguous();
  diff = diff.contiguous();
  g_y = g_y.contiguous();
  g_y_read = g_y_read.contiguous();
  w_final = w_final.contiguous();
  g_w = g_w.contiguous();
  const int64_t nb = x.size(0), steps = x.size(1), nh = x.size(2), e = x.size(3), c = w_final.size(3);
  const int64_t o = g_y.size(3), n = nb * nh, xs = nh * e, ys = nh * o;
  TORCH_CHECK(!read || g_y_read.sizes() == g_y.sizes(), "srwm_backward: g_y_read must match g_y");
  auto g_x = huge_pages(torch::empty_like(x));
  auto g_x_read = huge_pages(read ? torch::empty_like(x) : torch::empty({0}, x.options()));
  auto g_w0 = torch::empty_like(g_w);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "srwm_backward", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* xrp = read ? x_read.data_ptr<scalar_t>() : nullptr;
    const scalar_t* ap = act.data_ptr<scalar_t>();
    const scalar_t* dp = diff.data_ptr<scalar_t>();
    const scalar_t* gyp = g_y.data_ptr<scalar_t>();
    const scalar_t* gyrp = read ? g_y_read.data_ptr<scalar_t>() : nullptr;
    const scalar_t* wp = w_final.data_ptr<scalar_t>();
    const scalar_t* gwp = g_w.data_ptr<scalar_t>();
    scalar_t* gp = g_w0.data_ptr<scalar_t>();
    scalar_t* gxp = g_x.data_ptr<scalar_t>();
    scalar_t* gxrp = read ? g_x_read.data_ptr<scalar_t>() : nullptr;
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t bi = i / nh, hi = i % nh;
        const int64_t xo = bi * steps * xs + hi * e, yo = bi * steps * ys + hi * o;
        backward_one<scalar_t>(xp + xo, read ? xrp + xo : nullptr, ap + i * steps * (2 * e + 4),
                               dp + i * steps * c, wp + i * e * c, gwp + i * e * c, gp + i * e * c, gyp + yo,
                               read ? gyrp + yo : nullptr, gxp + xo, read ? gxrp + xo : nullptr, steps, e, c, o,
                               xs, ys);
      }
    });
  });
  return {g_x, g_x_read, g_w0};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("srwm_forward", &srwm_forward, "fused SRWM forward (CPU)");
  m.def("srwm_backward", &srwm_backward, "fused SRWM reversal backward (CPU)");
}
