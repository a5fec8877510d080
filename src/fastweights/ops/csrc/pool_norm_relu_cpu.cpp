// Fused 2x2 max-pooling + instance norm + ReLU on channels-last (NHWC) maps, forward and backward: the
// block of Conv-4 after its convolution (Vinyals et al. 2016; instance norm: Ulyanov et al. 2016), in
// either order: pool -> norm -> ReLU (pool_first) or norm -> pool -> ReLU. See ops/pool_norm_relu.py for
// the math and the reference composition of PyTorch ops it equals.
//
// One image at a time (parallel over the batch with at::parallel_for; every image's sums are taken by
// one thread in one fixed order, so results do not depend on the number of threads), the channel loop
// innermost and contiguous (vectorised by the compiler). The window's argmax is kept as one byte per
// pooled value (0..3 in row-major order; the first maximum wins, NaN counts as a maximum, as PyTorch's
// max_pool2d); the backward writes the full-resolution input gradient once (no zero fill first).
// Storage types float, double and bfloat16 (computed in float, statistics summed in double).
#include <torch/extension.h>

#include <ATen/Parallel.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

namespace {

template <typename T>
struct Op {
  using type = float;  // float and bfloat16 compute in float
};
template <>
struct Op<double> {
  using type = double;
};

// bfloat16 is stored as its 16 bits (uint16_t) and converted by integer shifts, which the compiler
// vectorises (c10::BFloat16's conversions are not): the upper half of a float32; a float32 rounds to the
// nearest bfloat16, ties to even (the maps are finite: the public op's callers reject NaN/Inf inputs).
using bf16_bits = uint16_t;

// The per-row helpers below stay out of line: their __restrict parameters let the compiler vectorise
// their loops without run-time aliasing checks, which inlined copies lose (the scalar fallback ran).
#define NOINLINE __attribute__((noinline))

template <typename T>
inline typename Op<T>::type ld(const T& v) {
  return static_cast<typename Op<T>::type>(v);
}
template <>
inline float ld<bf16_bits>(const bf16_bits& v) {
  const uint32_t u = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <typename T>
inline T st(typename Op<T>::type v) {
  return static_cast<T>(v);
}
template <>
inline bf16_bits st<bf16_bits>(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return static_cast<bf16_bits>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

// The shape of one block: input maps [H, W, C] per image, pooled maps [h, w, C] (h = H / 2, w = W / 2).
struct Shape {
  int64_t H, W, C, h, w;
  int64_t in_size() const { return H * W * C; }
  int64_t out_size() const { return h * w * C; }
};

// mean and 1/sqrt(var + eps) per channel of the maps x [P, C] (biased variance; two passes in double).
template <typename T>
void moments(const T* __restrict x, int64_t P, int64_t C, double eps, double* __restrict mean,
             double* __restrict rstd) {
  std::vector<double> sv(C, 0.0), qv(C, 0.0);
  double* __restrict s = sv.data();
  double* __restrict q = qv.data();
  for (int64_t i = 0; i < P; ++i) {
    const T* __restrict r = x + i * C;
    for (int64_t c = 0; c < C; ++c) s[c] += static_cast<double>(ld(r[c]));
  }
  for (int64_t c = 0; c < C; ++c) mean[c] = s[c] / static_cast<double>(P);
  for (int64_t i = 0; i < P; ++i) {
    const T* __restrict r = x + i * C;
    for (int64_t c = 0; c < C; ++c) {
      const double d = static_cast<double>(ld(r[c])) - mean[c];
      q[c] += d * d;
    }
  }
  for (int64_t c = 0; c < C; ++c) rstd[c] = 1.0 / std::sqrt(q[c] / static_cast<double>(P) + eps);
}

// Per-channel constants of one image in the compute type O.
template <typename O>
struct Coefficients {
  std::vector<O> mean, rstd, scale, shift;
  // z = x * scale + shift, the normalisation's affine map as PyTorch's batch norm computes it
  template <typename P>
  Coefficients(const double* m, const double* r, const P* gamma, const P* beta, int64_t C)
      : mean(C), rstd(C), scale(C), shift(C) {
    for (int64_t c = 0; c < C; ++c) {
      mean[c] = static_cast<O>(m[c]);
      rstd[c] = static_cast<O>(r[c]);
      scale[c] = rstd[c] * static_cast<O>(gamma[c]);
      shift[c] = static_cast<O>(beta[c]) - mean[c] * scale[c];
    }
  }
};

// One 2x2 window of C channels: rows a | b (top) and c | d (bottom) -> its maximum per channel m and
// the position of the first maximum k (0..3), of the values x * scale + shift (norm first) or x itself.
template <typename T, bool kNormed>
NOINLINE void pool_window(const T* __restrict a, const T* __restrict b, const T* __restrict c_,
                        const T* __restrict d, const typename Op<T>::type* __restrict scale,
                        const typename Op<T>::type* __restrict shift, typename Op<T>::type* __restrict m_out,
                        uint8_t* __restrict k_out, int64_t C) {
  using O = typename Op<T>::type;
  for (int64_t c = 0; c < C; ++c) {
    const O sc = kNormed ? scale[c] : O(1), sh = kNormed ? shift[c] : O(0);
    O m = kNormed ? ld(a[c]) * sc + sh : ld(a[c]);
    uint8_t k = 0;
    O v = kNormed ? ld(b[c]) * sc + sh : ld(b[c]);
    if (v > m) m = v, k = 1;
    v = kNormed ? ld(c_[c]) * sc + sh : ld(c_[c]);
    if (v > m) m = v, k = 2;
    v = kNormed ? ld(d[c]) * sc + sh : ld(d[c]);
    if (v > m) m = v, k = 3;
    m_out[c] = m;
    k_out[c] = k;
  }
}

// pool first, one image: y [H, W, C] -> p [h, w, C] window maxima, idx [h, w, C], out = relu(norm(p)).
template <typename T, typename P>
void pool_first_forward(const T* y, T* p, uint8_t* idx, T* out, double* mean, double* rstd, const P* gamma,
                        const P* beta, const Shape& s, double eps) {
  using O = typename Op<T>::type;
  const int64_t C = s.C, P_ = s.h * s.w;
  std::vector<O> m(C);
  for (int64_t i = 0; i < s.h; ++i) {
    for (int64_t j = 0; j < s.w; ++j) {
      const T* r0 = y + ((2 * i) * s.W + 2 * j) * C;
      const T* r1 = r0 + s.W * C;
      const int64_t q = (i * s.w + j) * C;
      pool_window<T, false>(r0, r0 + C, r1, r1 + C, nullptr, nullptr, m.data(), idx + q, C);
      T* __restrict pr = p + q;
      for (int64_t c = 0; c < C; ++c) pr[c] = st<T>(m[c]);  // exact: one of the inputs
    }
  }
  moments(p, P_, C, eps, mean, rstd);
  const Coefficients<O> k(mean, rstd, gamma, beta, C);
  const O* __restrict scale = k.scale.data();
  const O* __restrict shift = k.shift.data();
  for (int64_t i = 0; i < P_; ++i) {
    const T* __restrict pr = p + i * C;
    T* __restrict orow = out + i * C;
    for (int64_t c = 0; c < C; ++c) {
      const O z = ld(pr[c]) * scale[c] + shift[c];
      orow[c] = st<T>(z > O(0) ? z : O(0));
    }
  }
}

// norm first, one image: y [H, W, C] -> idx [h, w, C] (argmax of the normalised window), out = relu(max).
template <typename T, typename P>
void norm_first_forward(const T* y, uint8_t* idx, T* out, double* mean, double* rstd, const P* gamma,
                        const P* beta, const Shape& s, double eps) {
  using O = typename Op<T>::type;
  const int64_t C = s.C;
  moments(y, s.H * s.W, C, eps, mean, rstd);
  const Coefficients<O> k(mean, rstd, gamma, beta, C);
  std::vector<O> m(C);
  for (int64_t i = 0; i < s.h; ++i) {
    for (int64_t j = 0; j < s.w; ++j) {
      const T* r0 = y + ((2 * i) * s.W + 2 * j) * C;
      const T* r1 = r0 + s.W * C;
      const int64_t q = (i * s.w + j) * C;
      pool_window<T, true>(r0, r0 + C, r1, r1 + C, k.scale.data(), k.shift.data(), m.data(), idx + q, C);
      T* __restrict orow = out + q;
      for (int64_t c = 0; c < C; ++c) orow[c] = st<T>(m[c] > O(0) ? m[c] : O(0));
    }
  }
}

// The input gradient of the normalisation, g_x = gamma rstd (g_z - mean(g_z) - xhat mean(g_z xhat)),
// from the two sums: coefficients per channel a = gamma rstd, b = sum(g_z) / count, d = sum(g_z xhat) /
// count.
template <typename O>
struct NormGrad {
  std::vector<O> a, b, d;
  template <typename P>
  NormGrad(const double* sg, const double* sgx, const double* rstd, const P* gamma, int64_t C, int64_t count)
      : a(C), b(C), d(C) {
    for (int64_t c = 0; c < C; ++c) {
      a[c] = static_cast<O>(static_cast<double>(gamma[c]) * rstd[c]);
      b[c] = static_cast<O>(sg[c] / static_cast<double>(count));
      d[c] = static_cast<O>(sgx[c] / static_cast<double>(count));
    }
  }
};

// sg += g, sgx += g xhat over one row of C channels, g = g_out where out > 0 (ReLU), xhat = (x - mean) rstd.
template <typename T>
NOINLINE void accumulate_row(const T* __restrict x, const T* __restrict out, const T* __restrict g_out,
                           const typename Op<T>::type* __restrict mean, const typename Op<T>::type* __restrict rstd,
                           double* __restrict sg, double* __restrict sgx, int64_t C) {
  using O = typename Op<T>::type;
  for (int64_t c = 0; c < C; ++c) {
    const O g = ld(out[c]) > O(0) ? ld(g_out[c]) : O(0);
    const O xhat = (ld(x[c]) - mean[c]) * rstd[c];
    sg[c] += static_cast<double>(g);
    sgx[c] += static_cast<double>(g * xhat);
  }
}

// Rows and columns that no window covers (odd H or W) of a full-resolution gradient, set to zero.
template <typename T>
void zero_uncovered(T* g_y, const Shape& s) {
  for (int64_t i = 0; i < s.H; ++i)
    for (int64_t j = (i < 2 * s.h ? 2 * s.w : 0); j < s.W; ++j)
      for (int64_t c = 0; c < s.C; ++c) g_y[(i * s.W + j) * s.C + c] = st<T>(0);
}

// pool first: the input gradient of one window's four positions (row-major w0..w3) from its pooled
// values x, outputs and output gradients: the norm's gradient a (g - b - xhat d) at the argmax k, else 0.
template <typename T>
NOINLINE void scatter_window(const T* __restrict x, const T* __restrict out, const T* __restrict g_out,
                           const uint8_t* __restrict k, const typename Op<T>::type* __restrict mean,
                           const typename Op<T>::type* __restrict rstd, const typename Op<T>::type* __restrict a,
                           const typename Op<T>::type* __restrict b, const typename Op<T>::type* __restrict d,
                           T* __restrict w0, T* __restrict w1, T* __restrict w2, T* __restrict w3, int64_t C) {
  using O = typename Op<T>::type;
  for (int64_t c = 0; c < C; ++c) {
    const O g = ld(out[c]) > O(0) ? ld(g_out[c]) : O(0);
    const O xhat = (ld(x[c]) - mean[c]) * rstd[c];
    const O gp = a[c] * (g - b[c] - xhat * d[c]);
    const O kc = static_cast<O>(k[c]);  // compared as a float: one lane width in the loop
    w0[c] = st<T>(kc == O(0) ? gp : O(0));
    w1[c] = st<T>(kc == O(1) ? gp : O(0));
    w2[c] = st<T>(kc == O(2) ? gp : O(0));
    w3[c] = st<T>(kc == O(3) ? gp : O(0));
  }
}

// pool first, one image: g_out [h, w, C] -> g_y [H, W, C]; sums of g_z and g_z xhat per channel.
template <typename T, typename P>
void pool_first_backward(const T* p, const uint8_t* idx, const T* out, const T* g_out, const double* mean,
                         const double* rstd, const P* gamma, const Shape& s, T* g_y, double* sg, double* sgx) {
  using O = typename Op<T>::type;
  const int64_t C = s.C, P_ = s.h * s.w;
  for (int64_t c = 0; c < C; ++c) sg[c] = sgx[c] = 0.0;
  std::vector<O> mv(C), rv(C);
  for (int64_t c = 0; c < C; ++c) mv[c] = static_cast<O>(mean[c]), rv[c] = static_cast<O>(rstd[c]);
  const O* __restrict m = mv.data();
  const O* __restrict r = rv.data();
  for (int64_t i = 0; i < P_; ++i) accumulate_row(p + i * C, out + i * C, g_out + i * C, m, r, sg, sgx, C);
  const NormGrad<O> ng(sg, sgx, rstd, gamma, C, P_);
  const O* __restrict a = ng.a.data();
  const O* __restrict b = ng.b.data();
  const O* __restrict d = ng.d.data();
  for (int64_t i = 0; i < s.h; ++i) {
    for (int64_t j = 0; j < s.w; ++j) {
      const int64_t q = (i * s.w + j) * C;
      T* w0 = g_y + ((2 * i) * s.W + 2 * j) * C;
      T* w2 = w0 + s.W * C;
      scatter_window(p + q, out + q, g_out + q, idx + q, m, r, a, b, d, w0, w0 + C, w2, w2 + C, C);
    }
  }
  zero_uncovered(g_y, s);
}

// norm first: sg += g, sgx += g xhat over one window's C channels, g the pooled output gradient after
// the ReLU and xhat the normalised input at the argmax k (rows y0..y3 of the window, row-major).
template <typename T>
NOINLINE void accumulate_window(const T* __restrict y0, const T* __restrict y1, const T* __restrict y2,
                              const T* __restrict y3, const T* __restrict out, const T* __restrict g_out,
                              const uint8_t* __restrict k, const typename Op<T>::type* __restrict mean,
                              const typename Op<T>::type* __restrict rstd, double* __restrict sg,
                              double* __restrict sgx, int64_t C) {
  using O = typename Op<T>::type;
  for (int64_t c = 0; c < C; ++c) {
    const O g = ld(out[c]) > O(0) ? ld(g_out[c]) : O(0);
    const O kc = static_cast<O>(k[c]);
    const O x = kc == O(0) ? ld(y0[c]) : kc == O(1) ? ld(y1[c]) : kc == O(2) ? ld(y2[c]) : ld(y3[c]);
    const O xhat = (x - mean[c]) * rstd[c];
    sg[c] += static_cast<double>(g);
    sgx[c] += static_cast<double>(g * xhat);
  }
}

// norm first: the input gradient a (g_z - b - xhat d) of one position's C channels, g_z the pooled
// gradient after the ReLU where the position t (0..3 in its window) is the argmax k, else 0; a position
// in no window passes out = nullptr.
template <typename T>
NOINLINE void norm_grad_position(const T* __restrict y, const T* __restrict out, const T* __restrict g_out,
                               const uint8_t* __restrict k, int t, const typename Op<T>::type* __restrict mean,
                               const typename Op<T>::type* __restrict rstd, const typename Op<T>::type* __restrict a,
                               const typename Op<T>::type* __restrict b, const typename Op<T>::type* __restrict d,
                               T* __restrict g_y, int64_t C) {
  using O = typename Op<T>::type;
  if (out == nullptr) {
    for (int64_t c = 0; c < C; ++c) g_y[c] = st<T>(a[c] * (-b[c] - (ld(y[c]) - mean[c]) * rstd[c] * d[c]));
    return;
  }
  const O tf = static_cast<O>(t);
  for (int64_t c = 0; c < C; ++c) {
    const O g = (static_cast<O>(k[c]) == tf && ld(out[c]) > O(0)) ? ld(g_out[c]) : O(0);
    const O xhat = (ld(y[c]) - mean[c]) * rstd[c];
    g_y[c] = st<T>(a[c] * (g - b[c] - xhat * d[c]));
  }
}

// norm first, one image: g_out [h, w, C] -> g_y [H, W, C]; sums of g_z and g_z xhat per channel.
template <typename T, typename P>
void norm_first_backward(const T* y, const uint8_t* idx, const T* out, const T* g_out, const double* mean,
                         const double* rstd, const P* gamma, const Shape& s, T* g_y, double* sg, double* sgx) {
  using O = typename Op<T>::type;
  const int64_t C = s.C;
  for (int64_t c = 0; c < C; ++c) sg[c] = sgx[c] = 0.0;
  std::vector<O> m(C), r(C);
  for (int64_t c = 0; c < C; ++c) m[c] = static_cast<O>(mean[c]), r[c] = static_cast<O>(rstd[c]);
  // g_z is the pooled gradient (after the ReLU) at each window's argmax and zero elsewhere
  for (int64_t i = 0; i < s.h; ++i) {
    for (int64_t j = 0; j < s.w; ++j) {
      const int64_t q = (i * s.w + j) * C;
      const T* y0 = y + ((2 * i) * s.W + 2 * j) * C;
      const T* y2 = y0 + s.W * C;
      accumulate_window(y0, y0 + C, y2, y2 + C, out + q, g_out + q, idx + q, m.data(), r.data(), sg, sgx, C);
    }
  }
  const NormGrad<O> ng(sg, sgx, rstd, gamma, C, s.H * s.W);
  for (int64_t i = 0; i < s.H; ++i) {
    for (int64_t j = 0; j < s.W; ++j) {
      const int64_t q = ((i / 2) * s.w + (j / 2)) * C, o = (i * s.W + j) * C;
      const bool pooled = i < 2 * s.h && j < 2 * s.w;
      norm_grad_position(y + o, pooled ? out + q : nullptr, g_out + q, idx + q, static_cast<int>((i % 2) * 2 + j % 2),
                         m.data(), r.data(), ng.a.data(), ng.b.data(), ng.d.data(), g_y + o, C);
    }
  }
}

// The kernel's storage type of a tensor's scalar type: bfloat16 as its bits, others as themselves.
template <typename scalar_t>
using Storage = std::conditional_t<std::is_same_v<scalar_t, c10::BFloat16>, bf16_bits, scalar_t>;

Shape shape_of(const torch::Tensor& y) {
  TORCH_CHECK(y.dim() == 4, "pool_norm_relu: y must be [N, C, H, W]");
  const int64_t C = y.size(1), H = y.size(2), W = y.size(3);
  return Shape{H, W, C, H / 2, W / 2};
}

// The statistics' dtype: float64 for float64 maps, else float32 (also the dtype of gamma and beta).
torch::ScalarType param_type(const torch::Tensor& y) {
  return y.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

// y [N, C, H, W] channels-last, gamma/beta [C] -> {out [N, C, H/2, W/2] channels-last, p (pool first: the
// window maxima [N, C, H/2, W/2] channels-last; else empty), idx [N, H/2, W/2, C] uint8, mean [N, C],
// rstd [N, C] (float64)}.
std::vector<torch::Tensor> forward(torch::Tensor y, torch::Tensor gamma, torch::Tensor beta, bool pool_first,
                                   double eps) {
  const Shape s = shape_of(y);
  const int64_t n = y.size(0);
  y = y.contiguous(at::MemoryFormat::ChannelsLast);
  gamma = gamma.contiguous().to(param_type(y));
  beta = beta.contiguous().to(param_type(y));
  const auto cl = y.options().memory_format(at::MemoryFormat::ChannelsLast);
  auto out = torch::empty({n, s.C, s.h, s.w}, cl);
  auto p = pool_first ? torch::empty({n, s.C, s.h, s.w}, cl) : torch::empty({0}, y.options());
  auto idx = torch::empty({n, s.h, s.w, s.C}, y.options().dtype(torch::kUInt8));
  auto mean = torch::empty({n, s.C}, y.options().dtype(torch::kDouble));
  auto rstd = torch::empty({n, s.C}, y.options().dtype(torch::kDouble));
  AT_DISPATCH_FLOATING_TYPES_AND(at::ScalarType::BFloat16, y.scalar_type(), "pool_norm_relu_forward", [&] {
    using P = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    using S = Storage<scalar_t>;
    const S* yp = reinterpret_cast<const S*>(y.data_ptr<scalar_t>());
    S* op = reinterpret_cast<S*>(out.data_ptr<scalar_t>());
    S* pp = pool_first ? reinterpret_cast<S*>(p.data_ptr<scalar_t>()) : nullptr;
    uint8_t* ip = idx.data_ptr<uint8_t>();
    double* mp = mean.data_ptr<double>();
    double* rp = rstd.data_ptr<double>();
    const P* gp = gamma.data_ptr<P>();
    const P* bp = beta.data_ptr<P>();
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const S* yi = yp + i * s.in_size();
        S* oi = op + i * s.out_size();
        uint8_t* ii = ip + i * s.out_size();
        if (pool_first)
          pool_first_forward(yi, pp + i * s.out_size(), ii, oi, mp + i * s.C, rp + i * s.C, gp, bp, s, eps);
        else
          norm_first_forward(yi, ii, oi, mp + i * s.C, rp + i * s.C, gp, bp, s, eps);
      }
    });
  });
  return {out, p, idx, mean, rstd};
}

// saved = p (pool first) or y (norm first); g_out [N, C, h, w] -> {g_y [N, C, H, W] channels-last,
// g_gamma [N, C], g_beta [N, C]} (per image: summed over the batch by the caller).
std::vector<torch::Tensor> backward(torch::Tensor saved, torch::Tensor idx, torch::Tensor out, torch::Tensor g_out,
                                    torch::Tensor mean, torch::Tensor rstd, torch::Tensor gamma, bool pool_first,
                                    int64_t H, int64_t W) {
  const int64_t n = out.size(0), C = out.size(1);
  const Shape s{H, W, C, H / 2, W / 2};
  TORCH_CHECK(out.size(2) == s.h && out.size(3) == s.w, "pool_norm_relu_backward: shape mismatch");
  saved = saved.contiguous(at::MemoryFormat::ChannelsLast);
  out = out.contiguous(at::MemoryFormat::ChannelsLast);
  g_out = g_out.to(out.scalar_type()).contiguous(at::MemoryFormat::ChannelsLast);
  idx = idx.contiguous();
  mean = mean.contiguous();
  rstd = rstd.contiguous();
  gamma = gamma.contiguous().to(param_type(out));
  auto g_y = torch::empty({n, C, H, W}, out.options().memory_format(at::MemoryFormat::ChannelsLast));
  auto sg = torch::empty({n, C}, out.options().dtype(torch::kDouble));
  auto sgx = torch::empty({n, C}, out.options().dtype(torch::kDouble));
  AT_DISPATCH_FLOATING_TYPES_AND(at::ScalarType::BFloat16, out.scalar_type(), "pool_norm_relu_backward", [&] {
    using P = std::conditional_t<std::is_same_v<scalar_t, double>, double, float>;
    using S = Storage<scalar_t>;
    const S* sp = reinterpret_cast<const S*>(saved.data_ptr<scalar_t>());
    const S* op = reinterpret_cast<const S*>(out.data_ptr<scalar_t>());
    const S* gop = reinterpret_cast<const S*>(g_out.data_ptr<scalar_t>());
    const uint8_t* ip = idx.data_ptr<uint8_t>();
    const double* mp = mean.data_ptr<double>();
    const double* rp = rstd.data_ptr<double>();
    const P* gp = gamma.data_ptr<P>();
    S* gyp = reinterpret_cast<S*>(g_y.data_ptr<scalar_t>());
    double* sgp = sg.data_ptr<double>();
    double* sxp = sgx.data_ptr<double>();
    const int64_t saved_size = pool_first ? s.out_size() : s.in_size();
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t o = i * s.out_size();
        if (pool_first)
          pool_first_backward(sp + i * saved_size, ip + o, op + o, gop + o, mp + i * C, rp + i * C, gp, s,
                              gyp + i * s.in_size(), sgp + i * C, sxp + i * C);
        else
          norm_first_backward(sp + i * saved_size, ip + o, op + o, gop + o, mp + i * C, rp + i * C, gp, s,
                              gyp + i * s.in_size(), sgp + i * C, sxp + i * C);
      }
    });
  });
  return {g_y, sgx, sg};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("forward", &forward, "fused 2x2 max-pool + instance norm + ReLU, channels-last (CPU)");
  m.def("backward", &backward, "its backward (CPU)");
}
