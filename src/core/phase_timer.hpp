#pragma once
// Wall-clock time per named phase. Each phase is also a Kokkos profiling
// region with the same stable name ("miniattn::<phase>"), so Kokkos Tools
// (space-time stack, NVTX) show the mini-app's structure. The execution space
// is fenced at both ends so asynchronous device work is charged to its phase.
#include <map>
#include <string>
#include <vector>

namespace miniattn {

class PhaseTimer {
 public:
  class Scope {
   public:
    Scope(PhaseTimer& timer, const std::string& phase);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseTimer& timer_;
    std::string phase_;
    double start_;
  };

  Scope measure(const std::string& phase) { return Scope(*this, phase); }

  // Every recorded duration of every phase, in order.
  const std::map<std::string, std::vector<double>>& samples() const { return samples_; }
  double total(const std::string& phase) const;
  // Over the samples after end_warm_up() where the phase has any, else all:
  // the report's medians leave out the first step, as its step median does.
  double median(const std::string& phase) const;
  void end_warm_up();

 private:
  std::map<std::string, std::vector<double>> samples_;
  std::map<std::string, std::size_t> warm_up_;  // each phase's samples before end_warm_up()
};

double wall_seconds();
// The median of values (0 for none).
double median(std::vector<double> values);

}  // namespace miniattn
