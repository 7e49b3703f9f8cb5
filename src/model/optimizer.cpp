#include "model/optimizer.hpp"

#include <cmath>

#include "core/kokkos_compat.hpp"

namespace miniattn {

template <class T>
Optimizer<T>::Optimizer(const TrainConfig& train, const ParameterLayout& layout) : train_(train), layout_(layout) {
  if (train_.optimizer == "adamw") {
    m_ = ParameterBuffers<T>(layout, "adam.m");
    v_ = ParameterBuffers<T>(layout, "adam.v");
  }
}

template <class T>
void Optimizer<T>::step(const ParameterBuffers<T>& params, const ParameterBuffers<T>& grads, double grad_scale) {
  ++steps_taken_;
  const T lr = static_cast<T>(train_.lr);
  const T scale = static_cast<T>(grad_scale);
  const bool adamw = train_.optimizer == "adamw";
  const T beta1 = static_cast<T>(train_.beta1), beta2 = static_cast<T>(train_.beta2), eps = static_cast<T>(train_.eps);
  const T bias1 = static_cast<T>(1.0 - std::pow(train_.beta1, static_cast<double>(steps_taken_)));
  const T bias2 = static_cast<T>(1.0 - std::pow(train_.beta2, static_cast<double>(steps_taken_)));

  for (const ParameterInfo& info : layout_.parameters()) {
    const auto range = Kokkos::make_pair(info.offset, info.offset + info.local_size);
    auto p = Kokkos::subview(params.buffer_of(info), range);
    auto g = Kokkos::subview(grads.buffer_of(info), range);
    const T decay = info.weight_decay ? static_cast<T>(train_.weight_decay) : T(0);
    const auto policy = Kokkos::RangePolicy<ExecSpace>(0, info.local_size);
    if (adamw) {
      auto m = Kokkos::subview(m_.buffer_of(info), range);
      auto v = Kokkos::subview(v_.buffer_of(info), range);
      Kokkos::parallel_for(
          "miniattn::adamw", policy, KOKKOS_LAMBDA(const index_t i) {
            const T gi = scale * g(i);
            m(i) = beta1 * m(i) + (T(1) - beta1) * gi;
            v(i) = beta2 * v(i) + (T(1) - beta2) * gi * gi;
            const T m_hat = m(i) / bias1;
            const T v_hat = v(i) / bias2;
            p(i) = p(i) * (T(1) - lr * decay) - lr * m_hat / (compat::sqrt(v_hat) + eps);
          });
    } else {
      Kokkos::parallel_for(
          "miniattn::sgd", policy, KOKKOS_LAMBDA(const index_t i) { p(i) -= lr * (scale * g(i) + decay * p(i)); });
    }
  }
}

template <class T>
double sum_of_squares(const View1<const T>& values) {
  double sum = 0.0;
  Kokkos::parallel_reduce(
      "miniattn::sum_of_squares", Kokkos::RangePolicy<ExecSpace>(0, values.extent(0)),
      KOKKOS_LAMBDA(const index_t i, double& acc) {
        const double x = static_cast<double>(values(i));
        acc += x * x;
      },
      sum);
  return sum;
}

template class Optimizer<float>;
template class Optimizer<double>;
template double sum_of_squares<float>(const View1<const float>&);
template double sum_of_squares<double>(const View1<const double>&);

}  // namespace miniattn
