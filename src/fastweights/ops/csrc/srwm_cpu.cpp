// Fused SRWM recurrence on CPU: the forward and the reversal backward of ops/srwm_autograd.py, with the
// time loop inside compiled code and one (batch, head) fast-weight matrix at a time (parallel over
// batch x heads with at::parallel_for). Irie et al. 2022, Eq. 5-8; see ops/srwm.py for the math.
//
// Layout: x [N, T, E], w0 / w [N, E, C] (C = O + 2E + 4 columns y | q | k | beta), y [N, T, O],
// act [N, T, 2E + 4] (q | k after softmax, beta after sigmoid), diff [N, T, C] (d_t = (q_t - k_t) W_{t-1}).
#include <torch/extension.h>

#include <ATen/Parallel.h>
#include <cmath>
#include <vector>

namespace {

template <typename T>
void softmax_inplace(T* v, int64_t n) {
  T m = v[0];
  for (int64_t i = 1; i < n; ++i) m = v[i] > m ? v[i] : m;
  T s = 0;
  for (int64_t i = 0; i < n; ++i) {
    v[i] = std::exp(v[i] - m);
    s += v[i];
  }
  for (int64_t i = 0; i < n; ++i) v[i] /= s;
}

// column -> learning-rate index (0: y, 1: q, 2: k, 3: beta)
inline int rate_of(int64_t c, int64_t o, int64_t e) {
  if (c < o) return 0;
  if (c < o + e) return 1;
  if (c < o + 2 * e) return 2;
  return 3;
}

template <typename T>
void forward_one(const T* x, T* w, T* y, T* act, T* diff, int64_t steps, int64_t e, int64_t c, int64_t o) {
  std::vector<T> p(c), qmk(e), u(c);
  const int64_t na = 2 * e + 4;
  for (int64_t t = 0; t < steps; ++t) {
    const T* xt = x + t * e;
    for (int64_t j = 0; j < c; ++j) p[j] = 0;
    for (int64_t i = 0; i < e; ++i) {
      const T xi = xt[i];
      const T* wi = w + i * c;
      for (int64_t j = 0; j < c; ++j) p[j] += xi * wi[j];
    }
    for (int64_t j = 0; j < o; ++j) y[t * o + j] = p[j];
    T* a = act + t * na;
    for (int64_t j = 0; j < na; ++j) a[j] = p[o + j];
    softmax_inplace(a, e);
    softmax_inplace(a + e, e);
    for (int64_t j = 0; j < 4; ++j) a[2 * e + j] = T(1) / (T(1) + std::exp(-a[2 * e + j]));
    for (int64_t i = 0; i < e; ++i) qmk[i] = a[i] - a[e + i];
    T* d = diff + t * c;
    for (int64_t j = 0; j < c; ++j) d[j] = 0;
    for (int64_t i = 0; i < e; ++i) {
      const T qi = qmk[i];
      const T* wi = w + i * c;
      for (int64_t j = 0; j < c; ++j) d[j] += qi * wi[j];
    }
    for (int64_t j = 0; j < c; ++j) u[j] = d[j] * a[2 * e + rate_of(j, o, e)];
    for (int64_t i = 0; i < e; ++i) {
      const T ki = a[e + i];
      T* wi = w + i * c;
      for (int64_t j = 0; j < c; ++j) wi[j] += ki * u[j];
    }
  }
}

template <typename T>
void backward_one(const T* x, const T* act, const T* diff, T* w, T* g, const T* gy, T* gx, int64_t steps,
                  int64_t e, int64_t c, int64_t o) {
  std::vector<T> u(c), gu(c), gd(c), gproj(c), gk(e), gqmk(e), qmk(e);
  const int64_t na = 2 * e + 4;
  for (int64_t t = steps - 1; t >= 0; --t) {
    const T* a = act + t * na;
    const T* q = a;
    const T* k = a + e;
    const T* beta = a + 2 * e;
    const T* d = diff + t * c;
    const T* xt = x + t * e;
    for (int64_t j = 0; j < c; ++j) u[j] = d[j] * beta[rate_of(j, o, e)];
    for (int64_t i = 0; i < e; ++i) {  // W_{t-1} = W_t - k (x) u
      T* wi = w + i * c;
      for (int64_t j = 0; j < c; ++j) wi[j] -= k[i] * u[j];
    }
    for (int64_t j = 0; j < c; ++j) gu[j] = 0;
    for (int64_t i = 0; i < e; ++i) {  // with G = dL/dW_t: g_k = G u, g_u = k G
      const T* gi = g + i * c;
      T s = 0;
      for (int64_t j = 0; j < c; ++j) {
        s += gi[j] * u[j];
        gu[j] += k[i] * gi[j];
      }
      gk[i] = s;
    }
    T gbeta[4] = {0, 0, 0, 0};
    for (int64_t j = 0; j < c; ++j) {
      const int r = rate_of(j, o, e);
      gd[j] = gu[j] * beta[r];
      gbeta[r] += gu[j] * d[j];
    }
    for (int64_t i = 0; i < e; ++i) {  // g_(q-k) = g_d W_{t-1}^T
      const T* wi = w + i * c;
      T s = 0;
      for (int64_t j = 0; j < c; ++j) s += gd[j] * wi[j];
      gqmk[i] = s;
      qmk[i] = q[i] - k[i];
    }
    // softmax backward of q (gradient g_qmk) and k (gradient g_k - g_qmk)
    T dot_q = 0, dot_k = 0;
    for (int64_t i = 0; i < e; ++i) {
      dot_q += gqmk[i] * q[i];
      dot_k += (gk[i] - gqmk[i]) * k[i];
    }
    for (int64_t j = 0; j < o; ++j) gproj[j] = gy[t * o + j];
    for (int64_t i = 0; i < e; ++i) {
      gproj[o + i] = q[i] * (gqmk[i] - dot_q);
      gproj[o + e + i] = k[i] * ((gk[i] - gqmk[i]) - dot_k);
    }
    for (int64_t r = 0; r < 4; ++r) gproj[o + 2 * e + r] = gbeta[r] * beta[r] * (T(1) - beta[r]);
    for (int64_t i = 0; i < e; ++i) {  // g_x = g_proj W_{t-1}^T; G += (q - k) (x) g_d + x (x) g_proj
      const T* wi = w + i * c;
      T* gi = g + i * c;
      T s = 0;
      const T qi = qmk[i], xi = xt[i];
      for (int64_t j = 0; j < c; ++j) {
        s += gproj[j] * wi[j];
        gi[j] += qi * gd[j] + xi * gproj[j];
      }
      gx[t * e + i] = s;
    }
  }
}

std::vector<torch::Tensor> srwm_forward(torch::Tensor x, torch::Tensor w0, int64_t o) {
  TORCH_CHECK(x.dim() == 3 && w0.dim() == 3, "srwm_forward: x [N, T, E], w0 [N, E, C]");
  x = x.contiguous();
  auto w = w0.contiguous().clone();
  const int64_t n = x.size(0), steps = x.size(1), e = x.size(2), c = w.size(2);
  auto y = torch::empty({n, steps, o}, x.options());
  auto act = torch::empty({n, steps, 2 * e + 4}, x.options());
  auto diff = torch::empty({n, steps, c}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "srwm_forward", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* wp = w.data_ptr<scalar_t>();
    scalar_t* yp = y.data_ptr<scalar_t>();
    scalar_t* ap = act.data_ptr<scalar_t>();
    scalar_t* dp = diff.data_ptr<scalar_t>();
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        forward_one<scalar_t>(xp + i * steps * e, wp + i * e * c, yp + i * steps * o, ap + i * steps * (2 * e + 4),
                              dp + i * steps * c, steps, e, c, o);
    });
  });
  return {y, act, diff, w};
}

std::vector<torch::Tensor> srwm_backward(torch::Tensor x, torch::Tensor act, torch::Tensor diff,
                                         torch::Tensor w_final, torch::Tensor g_y, torch::Tensor g_w) {
  x = x.contiguous();
  act = act.contiguous();
  diff = diff.contiguous();
  g_y = g_y.contiguous();
  auto w = w_final.contiguous().clone();
  auto g = g_w.contiguous().clone();
  const int64_t n = x.size(0), steps = x.size(1), e = x.size(2), c = w.size(2), o = g_y.size(2);
  auto g_x = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "srwm_backward", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* ap = act.data_ptr<scalar_t>();
    const scalar_t* dp = diff.data_ptr<scalar_t>();
    const scalar_t* gyp = g_y.data_ptr<scalar_t>();
    scalar_t* wp = w.data_ptr<scalar_t>();
    scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t* gxp = g_x.data_ptr<scalar_t>();
    at::parallel_for(0, n, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i)
        backward_one<scalar_t>(xp + i * steps * e, ap + i * steps * (2 * e + 4), dp + i * steps * c,
                               wp + i * e * c, gp + i * e * c, gyp + i * steps * o, gxp + i * steps * e, steps,
                               e, c, o);
    });
  });
  return {g_x, g};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("srwm_forward", &srwm_forward, "fused SRWM forward (CPU)");
  m.def("srwm_backward", &srwm_backward, "fused SRWM reversal backward (CPU)");
}
