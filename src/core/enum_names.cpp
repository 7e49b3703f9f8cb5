// The deck words of every enumeration of config.hpp, in declaration order.
#include "core/config.hpp"

namespace miniattn {

template <>
const std::vector<std::string>& enum_names<Precision>() {
  static const std::vector<std::string> names = {"fp32", "fp64", "bf16"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<PositionEncoding>() {
  static const std::vector<std::string> names = {"learned", "rope"};
  return names;
}

template <>
const std::vector<std::string>& enum_names<Strategy>() {
  static const std::vector<std::string> names = {"local", "rsa", "ring", "ulysses", "hybrid", "allgather"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<Layout>() {
  static const std::vector<std::string> names = {"contiguous", "zigzag", "striped"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<CommBackend>() {
  static const std::vector<std::string> names = {"mpi", "nccl"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<GpuAwareMpi>() {
  static const std::vector<std::string> names = {"auto", "true", "false"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<OptimizerKind>() {
  static const std::vector<std::string> names = {"adamw", "sgd"};
  return names;
}
template <>
const std::vector<std::string>& enum_names<RunMode>() {
  static const std::vector<std::string> names = {"train", "bench", "predict", "calibrate"};
  return names;
}

template <>
const std::vector<std::string>& enum_names<AttentionKernel>() {
  static const std::vector<std::string> names = {"auto", "fused", "gemm", "tensor_core"};
  return names;
}

template <>
const std::vector<std::string>& enum_names<DataTask>() {
  static const std::vector<std::string> names = {"copy", "lookup"};
  return names;
}

}  // namespace miniattn
