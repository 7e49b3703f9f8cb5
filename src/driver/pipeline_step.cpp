// One step's forward and backward passes in the 1F1B order, or Megatron's
// interleaved 1F1B over the stage's model chunks. Activations go to the next
// virtual stage and their gradients to the previous one as non-blocking
// sends; a receive is posted when its pass is due and completed before it
// runs. The next virtual stage of (stage s, chunk c) is stage s + 1's chunk c,
// or, from the last stage, the first stage's chunk c + 1. Micro-batch k of
// chunk c lives in the chunk's slot k % slots: in 1F1B, interleaved or not,
// its previous occupant has finished its backward pass by then.
// The span is the whole pipeline's (between barriers of the stages), so a
// stage's idle time counts its wait for the first activation and for the
// others' last passes, as the bubble's model (pp - 1) / (v m + pp - 1) does.
#include "comm/exchange_watch.hpp"
#include "comm/watched_mpi.hpp"
#include "model/pipeline_schedule.hpp"
#include "driver/training_state.hpp"

namespace miniattn {

namespace {

// The rows of micro-batch k in a step's inputs or targets.
View1<const index_t> micro_batch_rows(const View1<index_t>& all, index_t k, index_t rows) {
  return Kokkos::subview(View1<const index_t>(all), Kokkos::make_pair(k * rows, (k + 1) * rows));
}

template <class T>
void receive(Comm& comm, const View2<T>& into, int source, MPI_Comm group, Exchange label) {
  PendingExchange pending;
  comm.post_recv(into.data(), into.span(), source, group, label, pending);
  comm.wait(pending);
}

// The neighbours of this stage's chunks in the model's order of virtual stages.
struct ChunkNeighbours {
  int stage = 0, stages = 1, chunks = 1;
  int previous(index_t chunk) const { return stage == 0 && chunk == 0 ? MPI_PROC_NULL : (stage + stages - 1) % stages; }
  int next(index_t chunk) const {
    return stage == stages - 1 && chunk == chunks - 1 ? MPI_PROC_NULL : (stage + 1) % stages;
  }
};

}  // namespace

template <class T>
PipelinePass run_pipeline(TrainingState<T>& s, index_t step) {
  const ProcessGrid& grid = s.grid;
  Transformer<T>& model = s.model;
  Comm& comm = *s.comm;
  const ChunkNeighbours neighbours{grid.pp_rank, grid.pp_size, s.layout.virtual_stages()};
  const index_t rows = s.share.micro_batch_rows();
  const double tokens = static_cast<double>(s.config.model.batch * s.config.model.seq_len);
  std::vector<PendingExchange> activation_sends(static_cast<std::size_t>(model.slots()));
  PendingExchange gradient_send;

  PipelinePass pass;
  if (grid.pp_size > 1) watched_barrier(grid.pp_comm, "pipeline.start");
  const double start = wall_seconds();
  for (const PipelineOp& op : interleaved_one_forward_one_backward(grid.pp_rank, grid.pp_size, neighbours.chunks,
                                                                   s.share.micro_batches)) {
    const index_t slot = model.slot_of(op.chunk, op.micro_batch);
    const int previous = neighbours.previous(op.chunk), next = neighbours.next(op.chunk);
    set_exchange_step(step, op.micro_batch);
    const View2<index_t> ids =
        s.document_ids.empty() ? View2<index_t>() : s.document_ids[static_cast<std::size_t>(slot)];
    const MicroBatch batch{micro_batch_rows(s.inputs, op.micro_batch, rows),
                           micro_batch_rows(s.targets, op.micro_batch, rows), ids};
    if (op.forward) {
      comm.wait(activation_sends[static_cast<std::size_t>(slot)]);  // the slot's last output has left
      if (ids.extent(0) > 0)  // packed documents: the micro-batch's ids, kept in its slot until its backward
        s.task.fill_documents(step, s.share.first_sample + op.micro_batch * static_cast<index_t>(ids.extent(0)), ids);
      if (previous != MPI_PROC_NULL)
        receive(comm, model.stage_input(slot), previous, grid.pp_comm, Exchange::pipeline_activations);
      const double t0 = wall_seconds();
      {
        auto timed = s.timer.measure("forward");
        pass.loss_sum += model.forward(s.weights, slot, batch);
      }
      pass.busy_seconds += wall_seconds() - t0;
      const View2<T> output = model.stage_output(slot);
      if (next != MPI_PROC_NULL)
        comm.post_send(output.data(), output.span(), next, grid.pp_comm, Exchange::pipeline_activations,
                       activation_sends[static_cast<std::size_t>(slot)]);
    } else {
      if (next != MPI_PROC_NULL)
        receive(comm, model.residual_gradient(), next, grid.pp_gradient_comm, Exchange::pipeline_gradients);
      const double t0 = wall_seconds();
      {
        auto timed = s.timer.measure("backward");
        model.backward(s.weights, s.grads, slot, batch, static_cast<Acc<T>>(1.0 / tokens));
      }
      pass.busy_seconds += wall_seconds() - t0;
      if (previous != MPI_PROC_NULL) {
        comm.wait(gradient_send);
        Kokkos::deep_copy(s.pipeline_send, model.residual_gradient());
        comm.post_send(s.pipeline_send.data(), s.pipeline_send.span(), previous, grid.pp_gradient_comm,
                       Exchange::pipeline_gradients, gradient_send);
      }
    }
  }
  for (PendingExchange& send : activation_sends) comm.wait(send);
  comm.wait(gradient_send);
  if (grid.pp_size > 1) watched_barrier(grid.pp_comm, "pipeline.end");
  pass.span_seconds = wall_seconds() - start;
  return pass;
}

template PipelinePass run_pipeline<float>(TrainingState<float>&, index_t);
template PipelinePass run_pipeline<double>(TrainingState<double>&, index_t);
template PipelinePass run_pipeline<bf16>(TrainingState<bf16>&, index_t);

}  // namespace miniattn
