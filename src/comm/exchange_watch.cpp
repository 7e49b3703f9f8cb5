#include "comm/exchange_watch.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/error.hpp"

namespace miniattn {

namespace {

// How often a waiting rank looks for another rank's notice, and how long the
// rank whose deadline passed lets the others write their records (and the
// launcher forward its own message) before it aborts the job.
constexpr double kNoticeInterval = 0.1;
constexpr auto kGraceBeforeAbort = std::chrono::milliseconds(1500);
constexpr auto kWatchdogInterval = std::chrono::milliseconds(250);
// A file's region times the whole read or write, not only its waits: it gets
// four deadlines (40 minutes at the default), so that a large checkpoint on
// a slow file system is not taken for a stalled rank.
constexpr double kFileRegionDeadlines = 4;
constexpr int kNoticeTag = 7;

struct Watch {
  ExchangeWatchSettings settings;
  std::unique_ptr<FlightRecord> record;
  ExchangePosition position;
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm notice = MPI_COMM_NULL;  // a duplicate of world: the notice cannot match an exchange
  MPI_Request notice_request = MPI_REQUEST_NULL;
  int notice_from = -1;
  bool record_written = false;
  std::int64_t skip_seen = 0;
  std::vector<std::function<void()>> abort_hooks;
  // The watchdog thread and the region it times.
  std::thread watchdog;
  std::mutex mutex;
  std::condition_variable wake;
  bool stopping = false;
  std::atomic<double> region_start{-1.0};
  std::atomic<const char*> region_label{""};

  FlightRecord& flight() {
    if (!record) record = std::make_unique<FlightRecord>(MPI_COMM_WORLD);
    return *record;
  }
  double deadline() const { return settings.deadline_seconds; }
};

Watch& watch() {
  static Watch w;
  return w;
}

std::string describe(const FlightEntry* e) {
  if (e == nullptr) return "an exchange no longer in the record";
  char text[256];
  std::snprintf(text, sizeof text, "%s #%llu (%s; step %lld, micro-batch %lld, layer %lld)", e->label,
                static_cast<unsigned long long>(e->seq), to_string(e->op), static_cast<long long>(e->where.step),
                static_cast<long long>(e->where.micro_batch), static_cast<long long>(e->where.layer));
  return text;
}

// The ranks an entry waits for: its peers, or its group's other ranks.
std::vector<int> peers_of(const FlightRecord& record, const FlightEntry* e) {
  std::vector<int> peers;
  if (e == nullptr) return peers;
  if (e->send_to >= 0) peers.push_back(e->send_to);
  if (e->recv_from >= 0 && e->recv_from != e->send_to) peers.push_back(e->recv_from);
  if (e->send_to < 0 && e->recv_from < 0)
    for (int r : record.group_ranks(e->group))
      if (r != record.world_rank()) peers.push_back(r);
  return peers;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string text;
  for (std::size_t i = 0; i < ranks.size() && i < 16; ++i) text += (i ? "," : "") + std::to_string(ranks[i]);
  if (ranks.size() > 16) text += ",... (" + std::to_string(ranks.size()) + " ranks)";
  return text.empty() ? "none" : text;
}

// Writes rank<R>.json into the record folder (a temporary name, then a
// rename: the analyzer never reads half a file). Returns its path, or why not.
std::string write_record(Watch& w, std::int64_t waiting) {
  namespace fs = std::filesystem;
  FlightRecord& record = w.flight();
  const fs::path folder = w.settings.record_folder.empty() ? fs::path(".") : fs::path(w.settings.record_folder);
  const fs::path path = folder / ("rank" + std::to_string(record.world_rank()) + ".json");
  std::error_code error;
  fs::create_directories(folder, error);
  const fs::path temporary = path.string() + ".tmp";
  {
    std::ofstream out(temporary);
    out << record.to_json(waiting, w.deadline()).dump(1) << "\n";
    if (!out) return "not written (" + temporary.string() + " cannot be written)";
  }
  fs::rename(temporary, path, error);
  w.record_written = !error;
  return error ? "not written (" + error.message() + ")" : path.string();
}

// The first of `entries` whose request has not completed (-1: all have).
std::int64_t first_waiting(MPI_Request* requests, const std::uint64_t* entries, int count) {
  for (int i = 0; i < count; ++i) {
    int done = 0;
    MPI_Test(&requests[i], &done, MPI_STATUS_IGNORE);
    if (!done) return static_cast<std::int64_t>(entries[i]);
  }
  return -1;
}

[[noreturn]] void abort_job(Watch& w) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::this_thread::sleep_for(kGraceBeforeAbort);
  for (const auto& hook : w.abort_hooks) hook();
  MPI_Abort(w.world != MPI_COMM_NULL ? w.world : MPI_COMM_WORLD, kExitDeadline);
  std::_Exit(kExitDeadline);  // MPI_Abort does not return
}

// Writes this rank's record, waiting in `waiting` (an entry's seq, -1: none),
// and says so in one line: `what` (ending in the place's preposition), where,
// how long and for whom it waits.
void record_and_say(Watch& w, std::int64_t waiting, double waited, const std::string& what) {
  FlightRecord& record = w.flight();
  const FlightEntry* e = waiting >= 0 ? record.find(static_cast<std::uint64_t>(waiting)) : nullptr;
  const std::string path = write_record(w, waiting);
  std::fprintf(stderr, "miniattn: rank %d: %s %s, waited %.1f s for rank(s) %s; flight record: %s\n",
               record.world_rank(), what.c_str(), describe(e).c_str(), waited,
               rank_list(peers_of(record, e)).c_str(), path.c_str());
  std::fflush(stderr);
}

// This rank's deadline passed while it waited in `waiting` for `waited`
// seconds: the record and the message, the notice, the abort.
[[noreturn]] void deadline_passed(Watch& w, std::int64_t waiting, double waited) {
  char what[96];
  std::snprintf(what, sizeof what, "exchange deadline of %g s (run.exchange_timeout_s) passed in", w.deadline());
  record_and_say(w, waiting, waited, what);
  if (w.notice != MPI_COMM_NULL) {
    // Static: the sends may still read it while this rank waits to abort.
    static int rank = 0;
    rank = w.flight().world_rank();
    for (int r = 0; r < w.flight().world_size(); ++r) {
      if (r == rank) continue;
      MPI_Request sent;
      MPI_Isend(&rank, 1, MPI_INT, r, kNoticeTag, w.notice, &sent);
      MPI_Request_free(&sent);
    }
  }
  abort_job(w);
}

// Another rank's deadline passed: write this rank's record once, say where
// it waits, and go on waiting to be ended with the job.
void look_for_notice(Watch& w, std::int64_t waiting, double waited) {
  if (w.notice_request == MPI_REQUEST_NULL || w.record_written) return;
  int arrived = 0;
  MPI_Test(&w.notice_request, &arrived, MPI_STATUS_IGNORE);
  if (!arrived) return;
  record_and_say(w, waiting, waited, "rank " + std::to_string(w.notice_from) + "'s exchange deadline passed; this rank is in");
}

void watchdog_loop(Watch& w) {
  std::unique_lock<std::mutex> lock(w.mutex);
  while (!w.wake.wait_for(lock, kWatchdogInterval, [&] { return w.stopping; })) {
    const double start = w.region_start.load();
    if (start < 0 || w.flight().now() - start <= kFileRegionDeadlines * w.deadline()) continue;
    // MPI_Abort from this thread: the main thread is inside the library's
    // MPI calls and cannot be asked to.
    FlightRecord& record = w.flight();
    const std::string path = write_record(w, -1);
    std::fprintf(stderr,
                 "miniattn: rank %d: exchange deadline of %g s (run.exchange_timeout_s; a file gets %g of them) "
                 "passed in %s (step %lld) after %.1f s; flight record: %s\n",
                 record.world_rank(), w.deadline(), kFileRegionDeadlines, w.region_label.load(),
                 static_cast<long long>(w.position.step),
                 w.flight().now() - start, path.c_str());
    abort_job(w);
  }
}

}  // namespace

void start_exchange_watch(const ExchangeWatchSettings& settings, MPI_Comm world) {
  Watch& w = watch();
  w.settings = settings;
  w.world = world;
  w.flight();
  if (settings.deadline_seconds <= 0) return;
  MPI_Comm_dup(world, &w.notice);
  MPI_Irecv(&w.notice_from, 1, MPI_INT, MPI_ANY_SOURCE, kNoticeTag, w.notice, &w.notice_request);
  w.stopping = false;
  w.watchdog = std::thread(watchdog_loop, std::ref(w));
}

void end_exchange_watch() {
  Watch& w = watch();
  if (w.watchdog.joinable()) {
    {
      std::lock_guard<std::mutex> lock(w.mutex);
      w.stopping = true;
    }
    w.wake.notify_all();
    w.watchdog.join();
  }
  if (w.notice_request != MPI_REQUEST_NULL) {
    MPI_Cancel(&w.notice_request);
    MPI_Wait(&w.notice_request, MPI_STATUS_IGNORE);
  }
  if (w.notice != MPI_COMM_NULL) MPI_Comm_free(&w.notice);
  w.settings = ExchangeWatchSettings{};
  w.world = MPI_COMM_NULL;
  w.abort_hooks.clear();
}

void set_exchange_step(std::int64_t step, std::int64_t micro_batch) {
  watch().position = ExchangePosition{step, micro_batch, -1};
}

void set_exchange_layer(std::int64_t layer) { watch().position.layer = layer; }

std::uint64_t record_exchange(const char* label, ExchangeOp op, MPI_Comm comm, std::uint64_t bytes, int dest,
                              int source) {
  Watch& w = watch();
  return w.flight().open(label, op, comm, bytes, w.position, dest, source).seq;
}

void complete_exchange(std::uint64_t seq) { watch().flight().complete(seq); }

bool skip_injected_exchange(const char* label) {
  Watch& w = watch();
  if (w.settings.skip_index < 0 || w.settings.skip_label != label) return false;
  return w.skip_seen++ == w.settings.skip_index;
}

void wait_for_requests(MPI_Request* requests, const std::uint64_t* entries, int count) {
  Watch& w = watch();
  if (w.deadline() <= 0) {
    MPI_Waitall(count, requests, MPI_STATUSES_IGNORE);
  } else {
    const double start = MPI_Wtime();
    double next_look = start + kNoticeInterval;
    for (int done = 0;;) {
      MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE);
      if (done) break;
      const double now = MPI_Wtime();
      if (now < next_look && now - start <= w.deadline()) continue;
      next_look = now + kNoticeInterval;
      const std::int64_t waiting = first_waiting(requests, entries, count);
      if (now - start > w.deadline()) deadline_passed(w, waiting, now - start);
      look_for_notice(w, waiting, now - start);
    }
  }
  for (int i = 0; i < count; ++i) w.flight().complete(entries[i]);
}

void wait_until(const std::function<bool()>& done, std::uint64_t entry) {
  Watch& w = watch();
  const double start = MPI_Wtime();
  double next_look = start + kNoticeInterval;
  while (!done()) {
    const double now = MPI_Wtime();
    if (w.deadline() <= 0 || (now < next_look && now - start <= w.deadline())) continue;
    next_look = now + kNoticeInterval;
    if (now - start > w.deadline()) deadline_passed(w, static_cast<std::int64_t>(entry), now - start);
    look_for_notice(w, static_cast<std::int64_t>(entry), now - start);
  }
  w.flight().complete(entry);
}

void on_exchange_abort(std::function<void()> hook) { watch().abort_hooks.push_back(std::move(hook)); }

WatchedRegion::WatchedRegion(const char* label) {
  watch().region_label.store(label);
  watch().region_start.store(watch().flight().now());
}

WatchedRegion::~WatchedRegion() { watch().region_start.store(-1.0); }

}  // namespace miniattn
