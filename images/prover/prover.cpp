// Stand-in for the cuzk proving daemon (see shared/cuzk-reference.md): same start-up, signals, memory
// holding and log formats, small enough to build in seconds. Compiled as CUDA when USE_CUDA is set
// (real cudaHostAlloc / cudaMemcpy / kernels), as plain C++ otherwise (the copy is a memcpy into a
// separate "device" buffer: through a bounce buffer for pageable memory, asynchronously for pinned).
//
// Build flags: TIMING=1 adds the fine-grained instrumentation (GPU_TIMING, FIN_TIMING, CUZK_TIMING,
// CUZK_NTT_H); PINNED=1 makes pinned host buffers the default; FAULT_CRASH exits at start;
// FAULT_NOREADY never prints the ready line; TAG names the build.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#ifdef USE_CUDA
#include <cuda_runtime.h>
#endif

#ifndef TAG
#define TAG "dev"
#endif
#ifndef PINNED_DEFAULT
#define PINNED_DEFAULT 0
#endif

using Clock = std::chrono::steady_clock;
static const Clock::time_point t0 = Clock::now();

static double ms_since(Clock::time_point t) {
    return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// ---- logging: tracing-subscriber's layout on stdout, plain lines on stderr -------------------------
// As cuzk's tracing-subscriber writes it (fmt/format/mod.rs, Format<Full>): the timestamp dimmed, the
// level in colour, span names and braces bold, field names italic, `=` and `:` dimmed. NO_COLOR set:
// the same without escape codes.

static const bool g_ansi = [] { const char* v = getenv("NO_COLOR"); return !v || !*v; }();

static std::string esc(const char* code, const std::string& s) {
    return g_ansi ? std::string("\x1b[") + code + "m" + s + "\x1b[0m" : s;
}

static std::string now_utc() {
    auto now = std::chrono::system_clock::now();
    auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count();
    time_t secs = us / 1000000;
    struct tm tm;
    gmtime_r(&secs, &tm);
    char buf[64];
    strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
    char out[80];
    snprintf(out, sizeof out, "%s.%06lldZ", buf, (long long)(us % 1000000));
    return out;
}

using Fields = std::vector<std::pair<std::string, std::string>>;

static std::string fields_str(const Fields& f) {
    std::string s;
    for (size_t i = 0; i < f.size(); i++) {
        if (i) s += " ";
        s += esc("3", f[i].first) + esc("2", "=") + f[i].second;
    }
    return s;
}

// `span` is e.g. gpu_worker with its own fields; empty span logs at the top level.
static void info(const std::string& span, const Fields& span_fields, const char* target,
                 const std::string& msg, const Fields& fields) {
    std::string line = esc("2", now_utc()) + " " + esc("32", " INFO") + " ";
    if (!span.empty()) line += esc("1", span) + esc("1", "{") + fields_str(span_fields) + esc("1", "}") + esc("2", ":") + " ";
    line += esc("2", target) + esc("2", ":") + " " + msg;
    if (!fields.empty()) line += " " + fields_str(fields);
    printf("%s\n", line.c_str());
    fflush(stdout);
}

// One fputs per line: the synthesis thread and the GPU worker log side by side.
static void err(const char* fmt, ...) {
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line - 1, fmt, ap);
    va_end(ap);
    n = n < 0 ? 0 : std::min(n, (int)sizeof line - 2);
    line[n] = '\n';
    line[n + 1] = 0;
    fputs(line, stderr);
    fflush(stderr);
}

static std::string num(double v) {
    char b[32];
    snprintf(b, sizeof b, "%.0f", v);
    return b;
}

// ---- config: the small TOML subset the stand-in needs (key = value; sections are ignored) ---------

struct Config {
    long memory_mib = 64;      // held for the daemon's lifetime, like the SRS
    int pinned = PINNED_DEFAULT;
    int partitions = 4;        // per job
    long partition_mib = 8;    // a/b/c vectors of one partition
    long synth_ms = 20;        // synthesis time per partition (CPU)
    long gpu_ms = 20;          // compute time per partition (GPU kernels)
    long jobs = 1;             // jobs to prove after start; -1 forever
    long job_interval_ms = 0;
    long start_delay_ms = 0;   // like loading the SRS
    int ignore_sigterm = 0;
    long child_hold_mib = 0;   // a helper child that keeps memory after the daemon dies
    long child_linger_ms = 0;
    long exit_after_ms = -1;   // crash this long after ready
    std::string listen = "";
};

static std::string trim(const std::string& s) {
    size_t a = s.find_first_not_of(" \t\r\""), b = s.find_last_not_of(" \t\r\"");
    return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

static bool load_config(const std::string& path, Config& c) {
    std::ifstream in(path);
    if (!in) return false;
    std::map<std::string, std::string> kv;
    std::string line;
    while (std::getline(in, line)) {
        auto hash = line.find('#');
        if (hash != std::string::npos) line = line.substr(0, hash);
        auto eq = line.find('=');
        if (eq == std::string::npos) continue;
        kv[trim(line.substr(0, eq))] = trim(line.substr(eq + 1));
    }
    auto L = [&](const char* k, long& v) { if (kv.count(k)) v = atol(kv[k].c_str()); };
    auto B = [&](const char* k, int& v) { if (kv.count(k)) v = kv[k] == "true" || kv[k] == "1"; };
    L("memory_mib", c.memory_mib);
    B("pinned", c.pinned);
    long parts = c.partitions;
    L("partitions", parts);
    c.partitions = (int)parts;
    L("partition_mib", c.partition_mib);
    L("synth_ms", c.synth_ms);
    L("gpu_ms", c.gpu_ms);
    L("jobs", c.jobs);
    L("job_interval_ms", c.job_interval_ms);
    L("start_delay_ms", c.start_delay_ms);
    B("ignore_sigterm", c.ignore_sigterm);
    L("child_hold_mib", c.child_hold_mib);
    L("child_linger_ms", c.child_linger_ms);
    L("exit_after_ms", c.exit_after_ms);
    if (kv.count("listen")) c.listen = kv["listen"];
    return true;
}

// ---- memory ---------------------------------------------------------------------------------------

static bool g_cuda = false;

static char* host_alloc(size_t bytes, bool pinned) {
    char* p = nullptr;
#ifdef USE_CUDA
    if (g_cuda && pinned) {
        if (cudaHostAlloc((void**)&p, bytes, cudaHostAllocDefault) == cudaSuccess) return p;
        p = nullptr;
    }
#endif
    p = (char*)malloc(bytes);
    if (!p) { err("allocation of %zu bytes failed", bytes); exit(1); }
    memset(p, 0, bytes);
    if (pinned) mlock(p, bytes);  // page-locked, as cudaHostAlloc memory is; best effort
    return p;
}

static void touch(char* p, size_t bytes) {
    for (size_t i = 0; i < bytes; i += 4096) p[i] = (char)i;
}

// Holds memory after the daemon dies, like a stray helper process: it leaves the daemon's process
// group and session, notices its parent is gone, then lingers.
static void spawn_memory_holder(long mib, long linger_ms) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return;
    setsid();
    signal(SIGTERM, SIG_IGN);
    size_t bytes = (size_t)mib << 20;
    char* p = (char*)malloc(bytes);
    touch(p, bytes);
    while (getppid() == parent) usleep(20000);
    usleep(linger_ms * 1000);
    _exit(0);
}

// ---- signals --------------------------------------------------------------------------------------

static std::atomic<int> g_sigint{0};
static void on_sigint(int) { g_sigint = 1; }

// ---- the proving loop -----------------------------------------------------------------------------

#ifdef USE_CUDA
__global__ void ntt_stand_in(unsigned* d, size_t n, int rounds) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    unsigned v = d[i];
    for (int r = 0; r < rounds; r++) v = v * 1664525u + 1013904223u;
    d[i] = v;
}
#endif

static void busy_for(long ms, char* buf, size_t bytes) {
    auto start = Clock::now();
    unsigned x = 12345;
    do {
        for (size_t i = 0; i < bytes; i += 64) { x = x * 1664525u + 1013904223u; buf[i] = (char)x; }
    } while (ms_since(start) < ms);
}

struct Gpu {
    char* dev = nullptr;  // device memory (or its host stand-in)
    size_t bytes = 0;
};

// Copies host -> "device". Returns ms spent blocking the host.
static double h2d(Gpu& g, const char* src, size_t bytes, bool pinned, char* bounce) {
    auto t = Clock::now();
#ifdef USE_CUDA
    if (g_cuda) {
        cudaMemcpy(g.dev, src, bytes, cudaMemcpyHostToDevice);
        return ms_since(t);
    }
#endif
    if (pinned) {
        memcpy(g.dev, src, bytes);  // DMA from page-locked memory: one copy
    } else {
        // What the driver does with pageable memory: stage through a pinned bounce buffer, in chunks.
        const size_t chunk = 1 << 20;
        for (size_t off = 0; off < bytes; off += chunk) {
            size_t n = bytes - off < chunk ? bytes - off : chunk;
            memcpy(bounce, src + off, n);
            memcpy(g.dev + off, bounce, n);
        }
    }
    return ms_since(t);
}

static void gpu_compute(Gpu& g, long ms) {
#ifdef USE_CUDA
    if (g_cuda) {
        auto t = Clock::now();
        size_t n = g.bytes / 4;
        while (ms_since(t) < ms) {
            ntt_stand_in<<<(unsigned)((n + 255) / 256), 256>>>((unsigned*)g.dev, n, 64);
            cudaDeviceSynchronize();
        }
        return;
    }
#endif
    // No GPU: the host waits while "the GPU" computes, as it does in cudaDeviceSynchronize. A busy loop
    // here would put the kernels on the CPU, where a loaded machine stretches them.
    (void)g;
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
}

// ---- the pipeline: synthesis on its own thread, ahead of the GPU worker -----------------------------
// As in cuzk, synthesis (CPU) and proving (GPU) run side by side: the synthesis thread fills one a/b/c
// buffer while the GPU worker copies and proves the other, so the GPU waits for synthesis only when
// synthesis is the slower of the two, and a slow host-to-device copy shows as time in the GPU phase.

static const int SLOTS = 2;  // a/b/c buffers: one being synthesized, one on the GPU

struct Pipeline {
    const Config& c;
    char* abc[SLOTS];
    std::mutex m;
    std::condition_variable cv;
    long synthesized = 0;  // partitions (over all jobs) whose a/b/c are ready
    long proven = 0;       // partitions the GPU is done with (their buffer is free)
    long released = 0;     // jobs the synthesis thread may start
    bool stop = false;
    std::vector<double> synth_ms;  // per partition, by its index over all jobs
};

static void job_name(int job, char* out, size_t n) { snprintf(out, n, "%08x", (unsigned)(0x5b1e90c2u + job * 7919u)); }

static void synthesize(Pipeline& pl) {
    const Config& c = pl.c;
    const size_t bytes = (size_t)c.partition_mib << 20;
    const bool pinned = c.pinned;
    for (long job = 0, i = 0; c.jobs < 0 || job < c.jobs; job++) {
        char job_id[16];
        job_name((int)job, job_id, sizeof job_id);
        for (int p = 0; p < c.partitions; p++, i++) {
            {
                std::unique_lock<std::mutex> lk(pl.m);
                pl.cv.wait(lk, [&] { return pl.stop || (job < pl.released && i - pl.proven < SLOTS); });
                if (pl.stop) return;
            }
            char* abc = pl.abc[i % SLOTS];
            err("TIMELINE,%.0f,SYNTH_START,%s,partition=%d", ms_since(t0), job_id, p);
            auto ts = Clock::now();
            busy_for(c.synth_ms, abc, bytes);  // synthesis writes the a/b/c vectors
            double synth = ms_since(ts);
            info("synthesize_partition", {{"job_id", std::string("\"") + job_id + "\""}, {"partition", std::to_string(p)}},
                 "cuzk_core::pipeline", "partition synthesis complete",
                 {{"partition", std::to_string(p)}, {"synth_ms", num(synth)}, {"is_pinned", pinned ? "true" : "false"}});
            err("TIMELINE,%.0f,SYNTH_END,%s,partition=%d,synth_ms=%.0f", ms_since(t0), job_id, p, synth);
            info("", {}, "cuzk_core::engine", "partition synthesis complete, pushing to GPU queue",
                 {{"job_id", job_id}, {"partition", std::to_string(p)}, {"synth_ms", num(synth)}});
            err("TIMELINE,%.0f,GPU_QUEUE,%s,partition=%d", ms_since(t0), job_id, p);
            std::lock_guard<std::mutex> lk(pl.m);
            pl.synth_ms.push_back(synth);
            pl.synthesized = i + 1;
            pl.cv.notify_all();
        }
    }
}

// The GPU worker's side of one job: waits for each partition's a/b/c, copies them and proves.
static void prove_job(Pipeline& pl, int job, Gpu& g, char* bounce) {
    const Config& c = pl.c;
    char job_id[16];
    job_name(job, job_id, sizeof job_id);
    const size_t bytes = (size_t)c.partition_mib << 20;
    const bool pinned = c.pinned;
    auto job_start = Clock::now();
    double synth_total = 0, gpu_total = 0;
    for (int p = 0; p < c.partitions; p++) {
        const long i = (long)job * c.partitions + p;
        {
            std::unique_lock<std::mutex> lk(pl.m);
            pl.cv.wait(lk, [&] { return pl.synthesized > i; });
            synth_total += pl.synth_ms[i];
        }
        const char* abc = pl.abc[i % SLOTS];
        // two GPU workers share the one GPU, as cuzk's gpu_workers_per_device = 2 (they take turns here)
        std::string part = "Some(" + std::to_string(p) + ")", worker = std::to_string(p % 2);
        Fields span = {{"worker_id", worker}, {"gpu", "0"}, {"job_id", job_id},
                       {"proof_kind", "porep-c2"}, {"batch_size", "1"}, {"partition", part}};
        err("TIMELINE,%.0f,GPU_PICKUP,%s,worker=%s,partition=%d", ms_since(t0), job_id, worker.c_str(), p);
#ifdef TIMING
        info("gpu_worker", span, "cuzk_core::engine", "GPU_TIMING hot_path pre-prove overhead",
             {{"worker_id", worker}, {"partition", part}, {"status_ms", "0"}, {"fail_check_ms", "0"},
              {"mark_busy_ms", "0"}, {"total_overhead_ms", "0"}});
#endif
        err("TIMELINE,%.0f,GPU_START,%s,worker=%s,partition=%d", ms_since(t0), job_id, worker.c_str(), p);
        auto tg = Clock::now();
        // ntt_kernels holds the a/b/c copy: synchronous from pageable memory, overlapped from pinned.
        double ntt_ms, sync_ms;
        if (pinned && !g_cuda) {
            std::thread dma([&] { h2d(g, abc, bytes, true, bounce); });
            auto tk = Clock::now();
            gpu_compute(g, c.gpu_ms / 4);
            ntt_ms = ms_since(tk);
            auto tw = Clock::now();
            dma.join();
            sync_ms = ms_since(tw);
        } else {
            auto tk = Clock::now();
            h2d(g, abc, bytes, pinned, bounce);
            gpu_compute(g, c.gpu_ms / 4);
            ntt_ms = ms_since(tk);
            sync_ms = 0;
        }
        auto tm = Clock::now();
        gpu_compute(g, c.gpu_ms - c.gpu_ms / 4);
        double msm = ms_since(tm);
        double gpu = ms_since(tg);
        gpu_total += gpu;
#ifdef TIMING
        err("CUZK_TIMING: split_vectors_ms=0 setup_to_split_ms=0");
        err("CUZK_TIMING: pre_lock_cpu_ms=0 mutex_wait_ms=0");
        err("CUZK_NTT_H: d_b_alloc=0ms ntt_kernels=%.0fms coset_intt_sync=%.0fms msm_init=0ms msm_invoke=%.0fms msm_dtor=0ms total=%.0fms",
            ntt_ms, sync_ms, msm, ntt_ms + sync_ms + msm);
        err("CUZK_TIMING: gpu_tid=0 ntt_msm_h_ms=%.0f", ntt_ms + sync_ms + msm);
        err("CUZK_TIMING: prep_msm_ms=0");
        err("CUZK_TIMING: gpu_tid=0 barrier_wait_ms=0");
        err("CUZK_TIMING: gpu_tid=0 batch_add_ms=0");
        err("CUZK_TIMING: gpu_tid=0 tail_msm_ms=0 gpu_total_ms=%.0f", gpu);
        err("CUZK_TIMING: mutex_held_ms=%.0f total_start_fn_ms=%.0f", gpu, gpu);
        err("CUZK_TIMING: b_g2_msm_ms=0 num_circuits=1");
        err("CUZK_TIMING: async_dealloc_ms=0");
        // logged inside spawn_blocking, outside the span, right after the start function returns
        info("", {}, "cuzk_core::engine", "GPU_TIMING spawn_blocking prove_start",
             {{"worker_id", worker}, {"partition", part}, {"spawn_to_enter_ms", "0"}, {"prove_start_ms", num(gpu)}});
        info("gpu_worker", span, "cuzk_core::engine", "GPU_TIMING prove_start returned",
             {{"worker_id", worker}, {"partition", part}, {"total_pre_prove_ms", num(gpu)},
              {"spawn_blocking_wall_ms", num(gpu)}});
#else
        (void)ntt_ms, (void)sync_ms, (void)msm;
#endif
        err("TIMELINE,%.0f,GPU_END,%s,worker=%s,partition=%d,gpu_ms=%.0f", ms_since(t0), job_id, worker.c_str(), p, gpu);
        info("", {}, "cuzk_core::engine", "partition GPU prove complete",
             {{"job_id", job_id}, {"partition", std::to_string(p)}, {"gpu_ms", num(gpu)},
              {"filled", p + 1 == c.partitions ? "1" : "0"}});
#ifdef TIMING
        info("", {}, "cuzk_core::engine", "FIN_TIMING malloc_trim (success path)",
             {{"job_id", job_id}, {"partition", std::to_string(p)}, {"malloc_trim_ms", "0"}});
        info("", {}, "cuzk_core::engine", "FIN_TIMING finalizer partition",
             {{"worker_id", worker}, {"partition", part}, {"finish_ms", "0"}, {"drop_res_ms", "0"},
              {"lock_wait_ms", "0"}, {"process_ms", "0"}, {"total_ms", "0"}});
#endif
        std::lock_guard<std::mutex> lk(pl.m);
        pl.proven = i + 1;
        pl.cv.notify_all();
    }
    info("", {}, "cuzk_core::engine", "Phase 7: all partitions complete, proof assembled",
         {{"job_id", job_id}, {"proof_len", "1920"}, {"total_ms", num(ms_since(job_start))},
          {"synth_ms", num(synth_total)}, {"gpu_ms", num(gpu_total)}});
}

static int open_listener(const std::string& addr) {
    auto colon = addr.rfind(':');
    if (colon == std::string::npos) return -1;
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)atoi(addr.c_str() + colon + 1));
    if (inet_pton(AF_INET, addr.substr(0, colon).c_str(), &sa.sin_addr) != 1) return -1;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (sockaddr*)&sa, sizeof sa) != 0 || listen(fd, 16) != 0) {
        err("cannot listen on %s: %s", addr.c_str(), strerror(errno));
        exit(1);
    }
    return fd;
}

static void detect_cuda() {
#ifdef USE_CUDA
    int devices = 0;
    g_cuda = cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
#endif
}

// Device memory for one partition's vectors, or its host stand-in (touched, so it is resident).
static Gpu gpu_alloc(size_t bytes) {
    Gpu g;
    g.bytes = bytes;
#ifdef USE_CUDA
    if (g_cuda) cudaMalloc((void**)&g.dev, bytes);
#endif
    if (!g.dev) {
        g.dev = (char*)malloc(bytes);
        touch(g.dev, bytes);  // device memory is not the host's to touch; this is host memory
    }
    return g;
}

// `prover --probe-h2d MIB`: host-to-device copy rate from pageable and from pinned memory, the
// measurement behind the pageable-vs-pinned diagnosis.
static int probe_h2d(long mib) {
    size_t bytes = (size_t)mib << 20;
    detect_cuda();
    Gpu g = gpu_alloc(bytes);
    char* bounce = host_alloc(1 << 20, true);
    for (int pinned = 0; pinned <= 1; pinned++) {
        char* src = host_alloc(bytes, pinned);
        touch(src, bytes);
        double best = 1e30;
        for (int i = 0; i < 3; i++) best = std::min(best, h2d(g, src, bytes, pinned, bounce));
        printf("H2D_PROBE %s bytes=%zu ms=%.2f GB/s=%.2f device=%s\n", pinned ? "pinned" : "pageable", bytes, best,
               bytes / best / 1e6, g_cuda ? "cuda" : "host-memcpy");
    }
    return 0;
}

int main(int argc, char** argv) {
    std::string config_path = "/data/zk/cuzk.toml", listen_arg;
    for (int i = 1; i < argc; i++) {
        std::string a = argv[i];
        if ((a == "-c" || a == "--config") && i + 1 < argc) config_path = argv[++i];
        else if ((a == "-l" || a == "--listen") && i + 1 < argc) listen_arg = argv[++i];
        else if (a == "--version") { printf("prover %s\n", TAG); return 0; }
        else if (a == "--probe-h2d" && i + 1 < argc) return probe_h2d(atol(argv[++i]));
    }
    Config c;
    load_config(config_path, c);  // a missing file means defaults, as with cuzk
    if (!listen_arg.empty()) c.listen = listen_arg;

    signal(SIGINT, on_sigint);
    if (c.ignore_sigterm) signal(SIGTERM, SIG_IGN);

    info("", {}, "cuzk_daemon", "cuzk-daemon starting",
         {{"build", TAG}, {"config", config_path}, {"pinned", c.pinned ? "true" : "false"}});
#ifdef FAULT_CRASH
    err("thread 'main' panicked at cuzk-daemon/src/main.rs:42:5: stand-in built to crash at start");
    return 101;
#endif
    detect_cuda();
#ifdef USE_CUDA
    if (!g_cuda) info("", {}, "cuzk_daemon", "no CUDA device; copies and kernels run on the host", {});
#endif
    // The SRS: allocated and touched, so it is resident.
    size_t hold = (size_t)c.memory_mib << 20;
    char* srs = host_alloc(hold, c.pinned);
    touch(srs, hold);
    if (c.child_hold_mib > 0) spawn_memory_holder(c.child_hold_mib, c.child_linger_ms);
    if (c.start_delay_ms > 0) usleep(c.start_delay_ms * 1000);

    size_t bytes = (size_t)c.partition_mib << 20;
    Pipeline pl{c, {}};
    for (auto& b : pl.abc) {
        b = host_alloc(bytes, c.pinned);
        touch(b, bytes);
    }
    char* bounce = host_alloc(1 << 20, true);
    Gpu g = gpu_alloc(bytes);

    std::string addr = c.listen.empty() ? "unix:///run/cuzk.sock" : c.listen;
#ifndef FAULT_NOREADY
    info("", {}, "cuzk_daemon", "cuzk-daemon ready, serving on " + addr, {});
#endif
    int lfd = c.listen.empty() ? -1 : open_listener(c.listen);
    (void)lfd;

    auto ready_at = Clock::now();
    // jobs back to back: synthesis runs on into the next job; with a pause between jobs, each job's
    // synthesis starts when the job does
    auto release = [&](long jobs) {
        std::lock_guard<std::mutex> lk(pl.m);
        pl.released = jobs;
        pl.cv.notify_all();
    };
    release(c.job_interval_ms > 0 ? 1 : LONG_MAX);
    std::thread synth(synthesize, std::ref(pl));
    for (long job = 0; c.jobs < 0 || job < c.jobs; job++) {
        prove_job(pl, (int)job, g, bounce);
        if (g_sigint.exchange(0)) info("", {}, "cuzk_daemon", "received SIGINT, shutting down", {});
        if (c.job_interval_ms > 0) usleep(c.job_interval_ms * 1000);
        if (c.exit_after_ms >= 0 && ms_since(ready_at) >= c.exit_after_ms) break;
        if (c.job_interval_ms > 0) release(job + 2);
    }
    {
        std::lock_guard<std::mutex> lk(pl.m);
        pl.stop = true;
        pl.cv.notify_all();
    }
    synth.join();
    for (;;) {  // idle: serve until killed
        if (g_sigint.exchange(0)) info("", {}, "cuzk_daemon", "received SIGINT, shutting down", {});
        if (c.exit_after_ms >= 0 && ms_since(ready_at) >= c.exit_after_ms) {
            err("thread 'gpu_worker' panicked: stand-in told to exit after %ld ms", c.exit_after_ms);
            return 101;
        }
        usleep(20000);
    }
}
