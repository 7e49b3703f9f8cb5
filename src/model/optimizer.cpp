#include "model/optimizer.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/kokkos_compat.hpp"
#include "kernels/base/simd_pack.hpp"

namespace miniattn {

namespace {
constexpr index_t kUpdateRange = 4096;  // elements per parallel item of the update
}

template <class T>
Optimizer<T>::Optimizer(const TrainConfig& train, const ParameterLayout& layout)
    : train_(train), layout_(layout), replicated_ranges_(ranges_of(false)), sharded_ranges_(ranges_of(true)) {
  if (train_.optimizer == OptimizerKind::adamw) {
    m_ = ParameterBuffers<T>(layout, "adam.m");
    v_ = ParameterBuffers<T>(layout, "adam.v");
  }
}

template <class T>
typename Optimizer<T>::Ranges Optimizer<T>::ranges_of(bool sharded) const {
  std::vector<index_t> bounds;
  std::vector<bool> decay;
  for (const ParameterInfo& info : layout_.parameters()) {
    if (info.sharded != sharded) continue;
    for (index_t begin = info.offset; begin < info.offset + info.local_size; begin += kUpdateRange) {
      bounds.push_back(begin);
      bounds.push_back(std::min(begin + kUpdateRange, info.offset + info.local_size));
      decay.push_back(info.weight_decay);
    }
  }
  Ranges r;
  r.bounds = decltype(r.bounds)("optimizer.ranges", decay.size());
  r.decay = decltype(r.decay)("optimizer.decay", decay.size());
  const auto bounds_host = Kokkos::create_mirror_view(r.bounds);
  const auto decay_host = Kokkos::create_mirror_view(r.decay);
  for (std::size_t i = 0; i < decay.size(); ++i) {
    bounds_host(i, 0) = bounds[2 * i];
    bounds_host(i, 1) = bounds[2 * i + 1];
    decay_host(i) = decay[i];
  }
  Kokkos::deep_copy(r.bounds, bounds_host);
  Kokkos::deep_copy(r.decay, decay_host);
  return r;
}

template <class T>
void Optimizer<T>::step(const ParameterBuffers<T>& params, const ParameterBuffers<T>& grads, double grad_scale) {
  ++steps_taken_;
  update(params.replicated, grads.replicated, m_.replicated, v_.replicated, replicated_ranges_,
         static_cast<T>(grad_scale));
  update(params.sharded, grads.sharded, m_.sharded, v_.sharded, sharded_ranges_, static_cast<T>(grad_scale));
}

namespace {

template <class T>
struct UpdateCoefficients {
  bool adamw;
  T lr, weight_decay, beta1, beta2, eps, bias1, bias2, grad_scale;
};

// One team per range of elements that share a weight-decay flag, its
// threads on consecutive elements (coalesced on a GPU; one thread per team on
// the host). A free function: CUDA's extended lambdas may not live in a
// private member function.
template <class T, class Bounds, class Decays>
void update_ranges(const View1<T>& p, const View1<T>& g, const View1<T>& m, const View1<T>& v, const Bounds& bounds,
                   const Decays& decays, const UpdateCoefficients<T>& c) {
  using Policy = Kokkos::TeamPolicy<ExecSpace>;
  const int items = static_cast<int>(decays.extent(0));
  const Policy policy = kHostExecution ? Policy(items, 1) : Policy(items, Kokkos::AUTO);
  Kokkos::parallel_for(
      c.adamw ? "miniattn::adamw" : "miniattn::sgd", policy, KOKKOS_LAMBDA(const Policy::member_type& team) {
        const index_t item = team.league_rank();
        const T decay = decays(item) ? c.weight_decay : T(0);
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, bounds(item, 0), bounds(item, 1)), [&](const index_t i) {
          const T gi = c.grad_scale * g(i);
          if (c.adamw) {
            m(i) = c.beta1 * m(i) + (T(1) - c.beta1) * gi;
            v(i) = c.beta2 * v(i) + (T(1) - c.beta2) * gi * gi;
            const T m_hat = m(i) / c.bias1;
            const T v_hat = v(i) / c.bias2;
            p(i) = p(i) * (T(1) - c.lr * decay) - c.lr * m_hat / (compat::sqrt(v_hat) + c.eps);
          } else {
            p(i) -= c.lr * (gi + decay * p(i));
          }
        });
      });
}

}  // namespace

template <class T>
void Optimizer<T>::update(const View1<T>& p, const View1<T>& g, const View1<T>& m, const View1<T>& v,
                          const Ranges& ranges, T grad_scale) const {
  UpdateCoefficients<T> c;
  c.adamw = train_.optimizer == OptimizerKind::adamw;
  c.lr = static_cast<T>(train_.lr);
  c.weight_decay = static_cast<T>(train_.weight_decay);
  c.beta1 = static_cast<T>(train_.beta1);
  c.beta2 = static_cast<T>(train_.beta2);
  c.eps = static_cast<T>(train_.eps);
  c.bias1 = static_cast<T>(1.0 - std::pow(train_.beta1, static_cast<double>(steps_taken_)));
  c.bias2 = static_cast<T>(1.0 - std::pow(train_.beta2, static_cast<double>(steps_taken_)));
  c.grad_scale = grad_scale;
  update_ranges(p, g, m, v, ranges.bounds, ranges.decay, c);
}

template class Optimizer<float>;
template class Optimizer<double>;

}  // namespace miniattn
