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
std::vector<int> rate_index(int64_t c, int64_t o, int64_t e) {
  std::vector<int> r(c);
  for (int64_t j = 0; j < c; ++j) r[j] = j < o ? 0 : (j < o + e ? 1 : (j < o + 2 * e ? 2 : 3));
  return r;
}

// The forward sweeps each step's matrix twice: d_t = (q_t - k_t) W_{t-1}, then the rank-1 update of
// every row fused with the next step's projection p_{t+1} = x_{t+1} W_t.
template <typename T>
void forward_one(const T* __restrict__ x, T* __restrict__ w, T* __restrict__ y, T* __restrict__ act,
                 T* __restrict__ diff, int64_t steps, int64_t e, int64_t c, int64_t o) {
  std::vector<T> pbuf(c), qbuf(e), ubuf(c);
  T* __restrict__ p = pbuf.data();
  T* __restrict__ qmk = qbuf.data();
  T* __restrict__ u = ubuf.data();
  const std::vector<int> rate = rate_index(c, o, e);
  const int64_t na = 2 * e + 4;
  for (int64_t j = 0; j < c; ++j) p[j] = 0;
  for (int64_t i = 0; i < e; ++i) {  // p_0 = x_0 W_0
    const T xi = x[i];
    const T* __restrict__ wi = w + i * c;
    for (int64_t j = 0; j < c; ++j) p[j] += xi * wi[j];
  }
  for (int64_t t = 0; t < steps; ++t) {
    for (int64_t j = 0; j < o; ++j) y[t * o + j] = p[j];
    T* __restrict__ a = act + t * na;
    for (int64_t j = 0; j < na; ++j) a[j] = p[o + j];
    softmax_inplace(a, e);
    softmax_inplace(a + e, e);
    for (int64_t j = 0; j < 4; ++j) a[2 * e + j] = T(1) / (T(1) + std::exp(-a[2 * e + j]));
    for (int64_t i = 0; i < e; ++i) qmk[i] = a[i] - a[e + i];
    T* __restrict__ d = diff + t * c;
    for (int64_t j = 0; j < c; ++j) d[j] = 0;
    for (int64_t i = 0; i < e; ++i) {
      const T qi = qmk[i];
      const T* __restrict__ wi = w + i * c;
      for (int64_t j = 0; j < c; ++j) d[j] += qi * wi[j];
    }
    for (int64_t j = 0; j < c; ++j) u[j] = d[j] * a[2 * e + rate[j]];
    const bool next = t + 1 < steps;
    const T* __restrict__ xn = x + (t + 1) * e;
    for (int64_t j = 0; j < c; ++j) p[j] = 0;
    for (int64_t i = 0; i < e; ++i) {
      const T ki = a[e + i];
      const T xi = next ? xn[i] : T(0);
      T* __restrict__ wi = w + i * c;
      for (int64_t j = 0; j < c; ++j) {
        const T v = wi[j] + ki * u[j];
        wi[j] = v;
        p[j] += xi * v;
      }
    }
  }
}

// W_{t-1} = W_t - k_t (x) u_t row by row, with g_k = G u_t and g_u = k_t G for G = dL/dW_t.
template <typename T>
void undo_row(T* __restrict__ wi, const T* __restrict__ gi, const T* __restrict__ u, T ki, T* __restrict__ gu,
              T& gk, int64_t c) {
  T s = 0;
  for (int64_t j = 0; j < c; ++j) {
    wi[j] -= ki * u[j];
    s += gi[j] * u[j];
    gu[j] += ki * gi[j];
  }
  gk = s;
}

// The backward sweeps each step's matrix twice: g_(q-k) = g_d W_{t-1}^T, then per row g_x, the update of
// G and (fused) the undo of step t-1 with its g_k, g_u.
template <typename T>
void backward_one(const T* __restrict__ x, const T* __restrict__ act, const T* __restrict__ diff,
                  T* __restrict__ w, T* __restrict__ g, const T* __restrict__ gy, T* __restrict__ gx,
                  int64_t steps, int64_t e, int64_t c, int64_t o) {
  std::vector<T> ub(c), gub(c), gdb(c), gpb(c), gkb(e), gqb(e), qb(e);
  T* __restrict__ u = ub.data();
  T* __restrict__ gu = gub.data();
  T* __restrict__ gd = gdb.data();
  T* __restrict__ gproj = gpb.data();
  T* __restrict__ gk = gkb.data();
  T* __restrict__ gqmk = gqb.data();
  T* __restrict__ qmk = qb.data();
  const std::vector<int> rate = rate_index(c, o, e);
  const int64_t na = 2 * e + 4;
  auto written = [&](int64_t t) {  // u_t = d_t * beta_t per column
    const T* beta = act + t * na + 2 * e;
    const T* d = diff + t * c;
    for (int64_t j = 0; j < c; ++j) u[j] = d[j] * beta[rate[j]];
  };
  written(steps - 1);
  for (int64_t j = 0; j < c; ++j) gu[j] = 0;
  for (int64_t i = 0; i < e; ++i) undo_row(w + i * c, g + i * c, u, act[(steps - 1) * na + e + i], gu, gk[i], c);
  for (int64_t t = steps - 1; t >= 0; --t) {
    const T* a = act + t * na;
    const T* q = a;
    const T* k = a + e;
    const T* beta = a + 2 * e;
    const T* d = diff + t * c;
    const T* xt = x + t * e;
    T gbeta[4] = {0, 0, 0, 0};
    for (int64_t j = 0; j < c; ++j) {
      const int r = rate[j];
      gd[j] = gu[j] * beta[r];
      gbeta[r] += gu[j] * d[j];
    }
    for (int64_t i = 0; i < e; ++i) {  // g_(q-k) = g_d W_{t-1}^T
      const T* __restrict__ wi = w + i * c;
      T s = 0;
      for (int64_t j = 0; j < c; ++j) s += gd[j] * wi[j];
      gqmk[i] = s;
      qmk[i] = q[i] - k[i];
    }
    T dot_q = 0, dot_k = 0;  // softmax backward of q (gradient g_qmk) and k (gradient g_k - g_qmk)
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
    const bool prev = t > 0;
    if (prev) written(t - 1);
    for (int64_t j = 0; j < c; ++j) gu[j] = 0;
    const T* kp = prev ? act + (t - 1) * na + e : nullptr;
    for (int64_t i = 0; i < e; ++i) {  // g_x = g_proj W_{t-1}^T; G += (q - k) (x) g_d + x (x) g_proj
      T* __restrict__ wi = w + i * c;
      T* __restrict__ gi = g + i * c;
      T s = 0;
      const T qi = qmk[i], xi = xt[i];
      for (int64_t j = 0; j < c; ++j) {
        s += gproj[j] * wi[j];
        gi[j] += qi * gd[j] + xi * gproj[j];
      }
      gx[t * e + i] = s;
      if (prev) undo_row(wi, gi, u, kp[i], gu, gk[i], c);
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
