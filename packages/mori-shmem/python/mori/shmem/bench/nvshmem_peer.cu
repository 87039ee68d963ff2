// SPDX-License-Identifier: MIT
//
// nvshmem_peer: the NVSHMEM side of mori-shmem's head-to-head benchmark.
//
// One process is one PE. The PEs of a run share GPU 0 under CUDA MPS (NVSHMEM_PEER_DEVICE picks
// another device) and bootstrap through NVSHMEM's unique id, passed between the processes in a
// file: rank 0 creates the id and writes it to <uid_file> (temporary file + rename, so a reader
// never sees half of it), the other ranks poll for the file.
//
//   nvshmem_peer <uid_file> <rank> <nranks> bw  [--scope thread|warp|block[,...]] [--sizes 8,64,...]
//                [--iters N] [--warmup N] [--blocks B] [--threads T] [--min-slice N[,...]]
//                [--max-slice N[,...]] [--grid capped|per-slice[,...]] [--reps N,...] <out.json>
//   nvshmem_peer <uid_file> <rank> <nranks> lat [--iters N] [--warmup N] [--size S] <out.json>
//
// Common options: --uid-timeout-s S (60), --wait-timeout-s S (10, every device-side wait),
// --watchdog-s S (0 = none: the whole process exits 6 after S seconds).
//
// bw: PE r puts `size` bytes from its symmetric source buffer to PE (r+1)%n, split over the grid
// at the scope's granularity (block: each block one nvshmemx_putmem_nbi_block on its slice; warp:
// each warp nvshmemx_putmem_nbi_warp; thread: each thread nvshmem_putmem_nbi). At most
// size/min_slice slices (min_slice 16 by default), at least one, of at most max_slice bytes
// (unlimited by default); slices are whole 16-byte vectors except the last; at most as many as
// --blocks blocks have workers unless max_slice calls for more. --grid capped (the default): a grid
// of at most --blocks blocks takes the slices grid-stride; per-slice: the grid has one worker per
// slice. Each worker quiets once after its slices. Per size:
// --warmup launches (5), then `iters` launches between two CUDA events, with nvshmem_barrier_all
// before so the PEs start together; after the timed loop each PE checks every byte its left
// neighbour put (the destination was cleared beforehand).
// iters = --iters if given, else enough launches for >= 20 ms, estimated from the first warm-up
// launch, clamped to 10..10000 and agreed between the PEs (the largest wins) so all PEs run the
// same number of launches.
//
// lat: PEs 0 and 1 ping-pong from one thread each inside ONE kernel launch per variant
// (the other PEs wait at the barrier). "putmem_signal": nvshmem_putmem_signal_nbi of `size` bytes
// with NVSHMEM_SIGNAL_SET to the round number, the receiver waits for signal >= round and replies
// the same way. "p_quiet_signal": nvshmem_uint64_p (8 bytes), nvshmem_quiet,
// nvshmemx_signal_op(SET). --warmup rounds (100) run first in the same launch; --iters rounds (10000) are timed,
// on PE 0 with %globaltimer; one-way latency = elapsed / (2 * iters). Rows are reported by
// rank 0 (other ranks report none).
//
// Output (out.json, written atomically):
//   {"peer": "nvshmem", "version": "3.4.5", "mode": "bw", "scope": "block", "rank": r, "nranks": n,
//    ..., "rows": [{"size": s, "iters": i, "time_us": t, "gbps": g, "scope": ..., "workers": w,
//    "blocks": b, "threads": t, "slice": l, "errors": 0}, ...]}
//   {"peer": "nvshmem", ..., "mode": "lat", "scope": null, ...,
//    "rows": [{"size": 8, "iters": N, "one_way_us": x, "variant": "putmem_signal"}, ...]}
//
// Exit codes: 0 ok, 1 CUDA/NVSHMEM/IO failure, 2 bad usage, 3 no unique id file within
// --uid-timeout-s, 4 a device-side wait gave up after --wait-timeout-s, 5 data check failed
// (JSON still written), 6 watchdog expired. NVSHMEM itself exits 255 when its initialisation fails.

#include <cuda_runtime.h>
#include <nvshmem.h>
#include <nvshmemx.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

enum ExitCode { kOk = 0, kFailure = 1, kUsage = 2, kUidTimeout = 3, kWaitTimeout = 4, kDataError = 5, kWatchdog = 6 };

int g_rank = -1;

[[noreturn]] void die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "nvshmem_peer[rank %d]: ", g_rank);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    fflush(stderr);
    exit(code);
}

#define CUDA_CHECK(call)                                                                          \
    do {                                                                                          \
        cudaError_t err_ = (call);                                                                \
        if (err_ != cudaSuccess)                                                                  \
            die(kFailure, "%s:%d: %s failed: %s (%s)", __FILE__, __LINE__, #call,                 \
                cudaGetErrorName(err_), cudaGetErrorString(err_));                                \
    } while (0)

#define NVSHMEM_CHECK(call)                                                                       \
    do {                                                                                          \
        int status_ = (call);                                                                     \
        if (status_ != 0) die(kFailure, "%s:%d: %s returned %d", __FILE__, __LINE__, #call, status_); \
    } while (0)

// ------------------------------------------------------------------------------------------------
// Device side
// ------------------------------------------------------------------------------------------------

enum Scope { kThread = 0, kWarp = 1, kBlock = 2 };

__device__ __forceinline__ uint64_t globaltimer_ns() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

// Byte i of PE pe's source buffer; never 0, so a cleared destination never passes the check.
__host__ __device__ __forceinline__ uint8_t pattern(size_t i, int pe) {
    return (uint8_t)(1u + (uint32_t)((i * 131u + (i >> 9) * 7u + (size_t)pe * 29u) % 255u));
}

__global__ void fill_kernel(uint8_t *buf, size_t n, int pe) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) buf[i] = pattern(i, pe);
}

__global__ void check_kernel(const uint8_t *buf, size_t n, int pe, unsigned long long *mismatches) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    unsigned long long bad = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride)
        bad += (buf[i] != pattern(i, pe));
    if (bad) atomicAdd(mismatches, bad);
}

// One put of `size` bytes to `peer`, split into `workers` slices of `slice` bytes (the last one
// shorter). Worker w is block w (block scope), global warp w (warp scope) or global thread w
// (thread scope); workers past `workers` return at once (uniformly per group, so the collective
// warp/block calls are made by whole groups).
//
// Completion: a put is complete when nvshmem_quiet returns in the thread that issued it. For
// thread scope every thread issued its own put, so every thread calls nvshmem_quiet. For warp and
// block scope the whole group issued one collective put, and nvshmemx_putmem_nbi_{warp,block}
// ends with a group sync; NVSHMEM 3.4 has no nvshmemx_quiet_{warp,block}, so one thread of the
// group calls nvshmem_quiet after that sync, which is what NVSHMEM's own group quiet does
// internally (nvshmemi_quiet<SCOPE>: thread 0 fences at system scope, then the group syncs; with
// a proxy transport the quiet drains every outstanding operation of the PE). Over P2P/NVLink (all
// this benchmark uses) a put is plain stores and quiet is __threadfence_system, so this costs one
// fence per issuing thread or group, nothing more; the end of the kernel would also make the
// stores visible, but the benchmark follows the documented rule rather than relying on that.
template <int SCOPE>
__global__ void put_kernel(uint8_t *dest, const uint8_t *src, size_t size, size_t slice, int workers, int peer,
                           int reps) {
    int worker;
    if (SCOPE == kBlock)
        worker = blockIdx.x;
    else if (SCOPE == kWarp)
        worker = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    else
        worker = blockIdx.x * blockDim.x + threadIdx.x;
    if (worker >= workers) return;
    const int grid_workers = SCOPE == kBlock ? gridDim.x : SCOPE == kWarp ? gridDim.x * (blockDim.x / 32)
                                                                          : gridDim.x * blockDim.x;
    // `reps` puts of the same slices per launch, each completed before the next, so small messages
    // measure the put rather than the kernel launch (mori's benchmark kernel does the same). A
    // worker takes slices worker, worker + grid_workers, ... and quiets once after them.
    for (int r = 0; r < reps; ++r) {
        for (int w = worker; w < workers; w += grid_workers) {
            size_t offset = (size_t)w * slice;
            size_t bytes = size - offset < slice ? size - offset : slice;
            if (SCOPE == kBlock)
                nvshmemx_putmem_nbi_block(dest + offset, src + offset, bytes, peer);
            else if (SCOPE == kWarp)
                nvshmemx_putmem_nbi_warp(dest + offset, src + offset, bytes, peer);
            else
                nvshmem_putmem_nbi(dest + offset, src + offset, bytes, peer);
        }
        if (SCOPE == kBlock) {
            if (threadIdx.x == 0) nvshmem_quiet();
            __syncthreads();
        } else if (SCOPE == kWarp) {
            if ((threadIdx.x & 31) == 0) nvshmem_quiet();
            __syncwarp();
        } else {
            nvshmem_quiet();
        }
    }
}

// Every PE writes `value` into slot [me] of `slots` on every PE (an all-gather of one int).
__global__ void share_int_kernel(int *slots, int value, int me, int npes) {
    for (int pe = 0; pe < npes; ++pe) nvshmem_int_p(slots + me, value, pe);
    nvshmem_quiet();
}

struct LatResult {
    unsigned long long elapsed_ns;
    int timed_out;  // 1: a wait gave up
    int bad_data;   // 1: the last payload received was not the last one sent
    unsigned long long waited_for;
    unsigned long long last_seen;
};

// nvshmem_signal_wait_until(sig, NVSHMEM_CMP_GE, value) with a deadline: NVSHMEM's wait spins on a
// volatile load of the signal with no timeout (NVSHMEM_TIMEOUT_DEVICE_POLLING is off in the
// wheel's build), so this spins on nvshmem_signal_fetch (the same volatile load) and reads
// %globaltimer only every 256 polls so the check stays off the fast path.
__device__ __forceinline__ bool bounded_signal_wait_ge(uint64_t *sig, uint64_t value, uint64_t timeout_ns) {
    if (nvshmem_signal_fetch(sig) >= value) return true;
    uint64_t start = globaltimer_ns();
    unsigned polls = 0;
    while (nvshmem_signal_fetch(sig) < value) {
        if ((++polls & 255u) == 0 && globaltimer_ns() - start > timeout_ns) return false;
    }
    return true;
}

enum LatVariant { kPutmemSignal = 0, kPQuietSignal = 1 };

// One thread. Round i (1-based) carries value i: the initiator sends then waits for the reply,
// the responder waits then replies. The first `warmup` rounds are not timed.
template <int VARIANT>
__global__ void pingpong_kernel(uint8_t *dest, uint8_t *src, uint64_t *sig, size_t size, int peer, int initiator,
                                int warmup, int iters, uint64_t timeout_ns, LatResult *result) {
    if (threadIdx.x != 0 || blockIdx.x != 0) return;
    const uint64_t total = (uint64_t)warmup + (uint64_t)iters;
    uint64_t start = globaltimer_ns();
    int timed_out = 0;
    for (uint64_t i = 1; i <= total; ++i) {
        if (i == (uint64_t)warmup + 1) start = globaltimer_ns();
        if (!initiator && !bounded_signal_wait_ge(sig, i, timeout_ns)) {
            timed_out = 1;
            result->waited_for = i;
            break;
        }
        if (VARIANT == kPutmemSignal) {
            // The payload's first 8 bytes carry the round, checked once at the end. The source may
            // be rewritten next round: the reply to this round proves the put was delivered.
            if (size >= 8) *(volatile uint64_t *)src = i;
            nvshmem_putmem_signal_nbi(dest, src, size, sig, i, NVSHMEM_SIGNAL_SET, peer);
        } else {
            nvshmem_uint64_p((uint64_t *)dest, i, peer);
            nvshmem_quiet();
            nvshmemx_signal_op(sig, i, NVSHMEM_SIGNAL_SET, peer);
        }
        if (initiator && !bounded_signal_wait_ge(sig, i, timeout_ns)) {
            timed_out = 1;
            result->waited_for = i;
            break;
        }
    }
    uint64_t end = globaltimer_ns();
    nvshmem_quiet();
    result->elapsed_ns = end - start;
    result->timed_out = timed_out;
    if (!timed_out && (VARIANT == kPQuietSignal || size >= 8)) {
        uint64_t seen = *(volatile uint64_t *)dest;
        result->last_seen = seen;
        result->bad_data = seen != total;
    }
}

// ------------------------------------------------------------------------------------------------
// Host side
// ------------------------------------------------------------------------------------------------

struct Options {
    std::string uid_file, mode, out_json;
    int rank = -1, nranks = -1;
    std::vector<std::string> scopes{"block"};
    std::vector<size_t> sizes;
    std::vector<size_t> min_slices{16};
    std::vector<size_t> max_slices{(size_t)1 << 40};
    std::vector<bool> per_slice_grids{false};  // --grid, one or per scope
    std::vector<long> reps;  // puts per launch, one per size (default 1)
    long iters = 0;   // 0: automatic
    int warmup = -1;  // -1: 5 launches (bw), 100 rounds (lat)
    int blocks = 0;  // 0: the SM count
    int threads = 512;
    size_t lat_size = 8;
    double uid_timeout_s = 60.0;
    double wait_timeout_s = 10.0;
    double watchdog_s = 0.0;
};

void usage(const char *msg) {
    fprintf(stderr,
            "nvshmem_peer: %s\n"
            "usage: nvshmem_peer <uid_file> <rank> <nranks> bw [--scope thread|warp|block[,...]] "
            "[--sizes 8,64,...] [--iters N] [--warmup N] [--blocks B] [--threads T] [--min-slice N[,...]] "
            "[--max-slice N[,...]] [--grid capped|per-slice[,...]] [--reps N,...] "
            "[--uid-timeout-s S] [--wait-timeout-s S] [--watchdog-s S] <out.json>\n"
            "       nvshmem_peer <uid_file> <rank> <nranks> lat [--iters N] [--warmup N] [--size S] [...] "
            "<out.json>\n",
            msg);
    exit(kUsage);
}

long long parse_int(const std::string &text, const char *what, long long lo, long long hi) {
    char *end = nullptr;
    errno = 0;
    long long v = strtoll(text.c_str(), &end, 10);
    if (text.empty() || errno != 0 || *end != '\0' || v < lo || v > hi) {
        std::string msg = std::string("bad ") + what + " '" + text + "' (want an integer in [" + std::to_string(lo) +
                          ", " + std::to_string(hi) + "])";
        usage(msg.c_str());
    }
    return v;
}

double parse_double(const std::string &text, const char *what) {
    char *end = nullptr;
    errno = 0;
    double v = strtod(text.c_str(), &end);
    if (text.empty() || errno != 0 || *end != '\0' || !(v >= 0.0)) {
        std::string msg = std::string("bad ") + what + " '" + text + "' (want a number >= 0)";
        usage(msg.c_str());
    }
    return v;
}

std::vector<std::string> split(const std::string &text) {
    std::vector<std::string> out;
    size_t start = 0;
    while (true) {
        size_t comma = text.find(',', start);
        out.push_back(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
    }
    return out;
}

Options parse(int argc, char **argv) {
    if (argc < 6) usage("too few arguments");
    Options o;
    o.uid_file = argv[1];
    o.nranks = (int)parse_int(argv[3], "nranks", 1, 1 << 20);
    o.rank = (int)parse_int(argv[2], "rank", 0, o.nranks - 1);
    g_rank = o.rank;
    o.mode = argv[4];
    o.out_json = argv[argc - 1];
    if (o.mode != "bw" && o.mode != "lat") usage("mode must be bw or lat");
    for (size_t s = 8; s <= (size_t)268435456; s *= 8) o.sizes.push_back(s);
    o.sizes.push_back(268435456);
    for (int i = 5; i < argc - 1; ++i) {
        std::string key = argv[i];
        if (i + 1 >= argc - 1) usage(("option " + key + " needs a value").c_str());
        std::string val = argv[++i];
        if (key == "--scope") {
            o.scopes = split(val);
            for (auto &s : o.scopes)
                if (s != "thread" && s != "warp" && s != "block") usage(("bad scope '" + s + "'").c_str());
        } else if (key == "--sizes") {
            o.sizes.clear();
            for (auto &s : split(val)) o.sizes.push_back((size_t)parse_int(s, "size", 1, 1LL << 40));
        } else if (key == "--min-slice") {
            o.min_slices.clear();
            for (auto &s : split(val)) o.min_slices.push_back((size_t)parse_int(s, "min slice", 1, 1LL << 40));
        } else if (key == "--max-slice") {
            o.max_slices.clear();
            for (auto &s : split(val)) o.max_slices.push_back((size_t)parse_int(s, "max slice", 16, 1LL << 40));
        } else if (key == "--grid") {
            o.per_slice_grids.clear();
            for (auto &s : split(val)) {
                if (s != "capped" && s != "per-slice") usage(("bad grid '" + s + "'").c_str());
                o.per_slice_grids.push_back(s == "per-slice");
            }
        } else if (key == "--reps") {
            o.reps.clear();
            for (auto &s : split(val)) o.reps.push_back((long)parse_int(s, "reps", 1, 1 << 20));
        } else if (key == "--iters") {
            o.iters = (long)parse_int(val, "iters", 0, 100000000);
        } else if (key == "--warmup") {
            o.warmup = (int)parse_int(val, "warmup", 0, 1000000);
        } else if (key == "--blocks") {
            o.blocks = (int)parse_int(val, "blocks", 0, 1 << 24);
        } else if (key == "--threads") {
            o.threads = (int)parse_int(val, "threads", 32, 1024);
        } else if (key == "--size") {
            o.lat_size = (size_t)parse_int(val, "size", 1, 1LL << 30);
        } else if (key == "--uid-timeout-s") {
            o.uid_timeout_s = parse_double(val, "uid timeout");
        } else if (key == "--wait-timeout-s") {
            o.wait_timeout_s = parse_double(val, "wait timeout");
        } else if (key == "--watchdog-s") {
            o.watchdog_s = parse_double(val, "watchdog");
        } else {
            usage(("unknown option " + key).c_str());
        }
    }
    if (o.threads % 32 != 0) usage("--threads must be a multiple of 32");
    if (!o.reps.empty() && o.reps.size() != o.sizes.size()) usage("--reps takes one value per size");
    if (o.min_slices.size() != 1 && o.min_slices.size() != o.scopes.size())
        usage("--min-slice takes one value or one per scope");
    if (o.max_slices.size() != 1 && o.max_slices.size() != o.scopes.size())
        usage("--max-slice takes one value or one per scope");
    if (o.per_slice_grids.size() != 1 && o.per_slice_grids.size() != o.scopes.size())
        usage("--grid takes one value or one per scope");
    if (o.mode == "lat" && o.nranks < 2) usage("lat needs at least 2 ranks");
    if (o.mode == "lat" && o.iters == 0) o.iters = 10000;
    if (o.warmup < 0) o.warmup = o.mode == "lat" ? 100 : 5;  // lat: rounds inside the launch
    return o;
}

double now_s() {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

void write_all(int fd, const void *data, size_t n, const char *path) {
    const char *p = (const char *)data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            die(kFailure, "writing %s: %s", path, strerror(errno));
        }
        p += w;
        n -= (size_t)w;
    }
}

// Writes `data` to `path` so that a reader sees either no file or all of it.
void write_atomically(const std::string &path, const void *data, size_t n) {
    std::string tmp = path + ".tmp." + std::to_string((long)getpid());
    int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) die(kFailure, "creating %s: %s", tmp.c_str(), strerror(errno));
    write_all(fd, data, n, tmp.c_str());
    if (fsync(fd) != 0) die(kFailure, "fsync %s: %s", tmp.c_str(), strerror(errno));
    if (close(fd) != 0) die(kFailure, "closing %s: %s", tmp.c_str(), strerror(errno));
    if (rename(tmp.c_str(), path.c_str()) != 0)
        die(kFailure, "renaming %s to %s: %s", tmp.c_str(), path.c_str(), strerror(errno));
}

nvshmemx_uniqueid_t exchange_unique_id(const Options &o) {
    nvshmemx_uniqueid_t uid = NVSHMEMX_UNIQUEID_INITIALIZER;
    if (o.rank == 0) {
        NVSHMEM_CHECK(nvshmemx_get_uniqueid(&uid));
        write_atomically(o.uid_file, &uid, sizeof uid);
        return uid;
    }
    double deadline = now_s() + o.uid_timeout_s;
    while (true) {
        struct stat st;
        if (stat(o.uid_file.c_str(), &st) == 0 && (size_t)st.st_size == sizeof uid) {
            int fd = open(o.uid_file.c_str(), O_RDONLY);
            if (fd < 0) die(kFailure, "opening %s: %s", o.uid_file.c_str(), strerror(errno));
            ssize_t got = read(fd, &uid, sizeof uid);
            close(fd);
            if (got != (ssize_t)sizeof uid) die(kFailure, "short read of %s (%zd bytes)", o.uid_file.c_str(), got);
            return uid;
        }
        if (now_s() > deadline)
            die(kUidTimeout, "no unique id in %s after %.1f s (did rank 0 start?)", o.uid_file.c_str(),
                o.uid_timeout_s);
        usleep(10000);
    }
}

void watchdog_expired(int) {
    static const char msg[] = "nvshmem_peer: watchdog expired, exiting\n";
    ssize_t ignored = write(2, msg, sizeof msg - 1);
    (void)ignored;
    _exit(kWatchdog);
}

std::string json_escape(const std::string &s) {
    std::string out;
    for (char c : s) {
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if ((unsigned char)c < 0x20) {
            char buf[8];
            snprintf(buf, sizeof buf, "\\u%04x", c);
            out += buf;
        } else {
            out += c;
        }
    }
    return out;
}

std::string fmt(const char *f, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

std::string json_number(double v) {
    // JSON has no inf/nan.
    if (!(v == v) || v > 1e300 || v < -1e300) return "null";
    return fmt("%.9g", v);
}

struct Geometry {
    int workers, blocks;
    size_t slice;
};

// Slices of at least min_slice bytes (at most as many as max_blocks blocks have workers, unless
// max_slice calls for more) and at most max_slice, whole 16-byte vectors except the last, no empty
// slice; `workers` counts the slices. The grid is capped at max_blocks (its workers take the slices
// grid-stride) or, with per_slice, has one worker per slice (mori's bench_gpu.geometry).
Geometry geometry(int scope, size_t size, size_t min_slice, size_t max_slice, int max_blocks, int threads,
                  bool per_slice) {
    long long per_block = scope == kBlock ? 1 : scope == kWarp ? threads / 32 : threads;
    long long max_workers = per_block * max_blocks;
    long long workers = std::max<long long>(1, std::min<long long>(max_workers, (long long)(size / min_slice)));
    size_t slice = (size + workers - 1) / workers;
    slice = std::min(max_slice, (slice + 15) / 16 * 16);
    workers = (long long)((size + slice - 1) / slice);
    Geometry g;
    g.workers = (int)workers;
    g.slice = slice;
    const long long blocks = (workers + per_block - 1) / per_block;
    g.blocks = (int)(per_slice ? blocks : std::min<long long>(max_blocks, blocks));
    return g;
}

void launch_put(int scope, const Geometry &g, int threads, uint8_t *dest, const uint8_t *src, size_t size, int peer,
                int reps, cudaStream_t stream) {
    if (scope == kBlock)
        put_kernel<kBlock><<<g.blocks, threads, 0, stream>>>(dest, src, size, g.slice, g.workers, peer, reps);
    else if (scope == kWarp)
        put_kernel<kWarp><<<g.blocks, threads, 0, stream>>>(dest, src, size, g.slice, g.workers, peer, reps);
    else
        put_kernel<kThread><<<g.blocks, threads, 0, stream>>>(dest, src, size, g.slice, g.workers, peer, reps);
    CUDA_CHECK(cudaGetLastError());
}

int scope_id(const std::string &s) { return s == "block" ? kBlock : s == "warp" ? kWarp : kThread; }

void *symmetric_alloc(size_t bytes, const char *what) {
    void *p = nvshmem_malloc(bytes);
    if (p == nullptr) die(kFailure, "nvshmem_malloc(%zu) for the %s returned NULL", bytes, what);
    return p;
}

int run_bw(const Options &o, int me, int npes, int sm_count, std::vector<std::string> &rows, int &blocks_used) {
    const int peer = (me + 1) % npes;
    const int left = (me - 1 + npes) % npes;
    const int max_blocks = o.blocks > 0 ? o.blocks : sm_count;
    blocks_used = max_blocks;
    const size_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
    uint8_t *src = (uint8_t *)symmetric_alloc(largest, "source buffer");
    uint8_t *dest = (uint8_t *)symmetric_alloc(largest, "destination buffer");
    int *slots = (int *)symmetric_alloc(sizeof(int) * (size_t)npes, "iteration slots");
    unsigned long long *mismatches = nullptr;
    CUDA_CHECK(cudaMalloc(&mismatches, sizeof *mismatches));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    fill_kernel<<<4 * sm_count, 256, 0, stream>>>(src, largest, me);
    CUDA_CHECK(cudaGetLastError());
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<int> gathered((size_t)npes);
    int failures = 0;

    for (size_t si = 0; si < o.scopes.size(); ++si) {
        const int scope = scope_id(o.scopes[si]);
        const size_t min_slice = o.min_slices.size() == 1 ? o.min_slices[0] : o.min_slices[si];
        const size_t max_slice = o.max_slices.size() == 1 ? o.max_slices[0] : o.max_slices[si];
        const bool per_slice = o.per_slice_grids.size() == 1 ? o.per_slice_grids[0] : o.per_slice_grids[si];
        for (size_t zi = 0; zi < o.sizes.size(); ++zi) {
            const size_t size = o.sizes[zi];
            const int reps = o.reps.empty() ? 1 : (int)o.reps[zi];
            Geometry g = geometry(scope, size, min_slice, max_slice, max_blocks, o.threads, per_slice);
            CUDA_CHECK(cudaMemsetAsync(dest, 0, size, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            nvshmem_barrier_all();  // every destination is clear before anyone puts

            float first_ms = 0.f;
            const int warmups = o.iters > 0 ? o.warmup : std::max(1, o.warmup);  // automatic iters time one
            for (int w = 0; w < warmups; ++w) {
                if (w == 0) CUDA_CHECK(cudaEventRecord(start, stream));
                launch_put(scope, g, o.threads, dest, src, size, peer, reps, stream);
                if (w == 0) {
                    CUDA_CHECK(cudaEventRecord(stop, stream));
                    CUDA_CHECK(cudaEventSynchronize(stop));
                    CUDA_CHECK(cudaEventElapsedTime(&first_ms, start, stop));
                }
            }
            CUDA_CHECK(cudaStreamSynchronize(stream));

            long iters = o.iters;
            if (iters <= 0) {
                // >= 20 ms per size from the first warm-up launch, the same count on every PE.
                double est = first_ms > 0.f ? 20.0 / (double)first_ms : 10000.0;
                int mine = (int)std::min(10000.0, std::max(10.0, est + 0.999));
                share_int_kernel<<<1, 1, 0, stream>>>(slots, mine, me, npes);
                CUDA_CHECK(cudaGetLastError());
                CUDA_CHECK(cudaStreamSynchronize(stream));
                nvshmem_barrier_all();
                CUDA_CHECK(cudaMemcpy(gathered.data(), slots, sizeof(int) * (size_t)npes, cudaMemcpyDeviceToHost));
                iters = *std::max_element(gathered.begin(), gathered.end());
            }

            nvshmem_barrier_all();  // start together (also: everyone has read the slots)
            CUDA_CHECK(cudaEventRecord(start, stream));
            for (long it = 0; it < iters; ++it) launch_put(scope, g, o.threads, dest, src, size, peer, reps, stream);
            CUDA_CHECK(cudaEventRecord(stop, stream));
            CUDA_CHECK(cudaEventSynchronize(stop));
            float ms = 0.f;
            CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
            nvshmem_barrier_all();  // the left neighbour's puts are complete

            CUDA_CHECK(cudaMemsetAsync(mismatches, 0, sizeof *mismatches, stream));
            int check_blocks = (int)std::min<size_t>((size_t)4 * sm_count, (size + 255) / 256);
            check_kernel<<<check_blocks, 256, 0, stream>>>(dest, size, left, mismatches);
            CUDA_CHECK(cudaGetLastError());
            unsigned long long bad = 0;
            CUDA_CHECK(cudaMemcpyAsync(&bad, mismatches, sizeof bad, cudaMemcpyDeviceToHost, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            if (bad) {
                fprintf(stderr, "nvshmem_peer[rank %d]: scope %s size %zu: %llu of %zu bytes from PE %d are wrong\n",
                        me, o.scopes[si].c_str(), size, bad, size, left);
                ++failures;
            }

            double time_us = (double)ms * 1e3 / (double)iters / (double)reps;  // per put
            double gbps = time_us > 0 ? (double)size / (time_us * 1e3) : 0.0;
            rows.push_back(fmt("{\"size\": %zu, \"iters\": %ld, \"time_us\": %s, \"gbps\": %s, \"scope\": \"%s\", "
                               "\"workers\": %d, \"blocks\": %d, \"threads\": %d, \"slice\": %zu, \"errors\": %llu}",
                               size, iters, json_number(time_us).c_str(), json_number(gbps).c_str(),
                               o.scopes[si].c_str(), g.workers, g.blocks, o.threads, g.slice, bad));
        }
    }

    nvshmem_barrier_all();
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    CUDA_CHECK(cudaStreamDestroy(stream));
    CUDA_CHECK(cudaFree(mismatches));
    nvshmem_free(slots);
    nvshmem_free(dest);
    nvshmem_free(src);
    return failures;
}

// Returns 0, kWaitTimeout or kDataError.
int run_lat(const Options &o, int me, std::vector<std::string> &rows) {
    const size_t buf_bytes = std::max<size_t>(o.lat_size, 8);
    uint8_t *src = (uint8_t *)symmetric_alloc(buf_bytes, "source buffer");
    uint8_t *dest = (uint8_t *)symmetric_alloc(buf_bytes, "destination buffer");
    uint64_t *sigs = (uint64_t *)symmetric_alloc(2 * sizeof(uint64_t), "signals");
    CUDA_CHECK(cudaMemset(src, 0, buf_bytes));
    CUDA_CHECK(cudaMemset(sigs, 0, 2 * sizeof(uint64_t)));
    LatResult *result = nullptr;
    CUDA_CHECK(cudaMalloc(&result, sizeof *result));
    cudaStream_t stream;
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const uint64_t timeout_ns = (uint64_t)(o.wait_timeout_s * 1e9);
    int status = 0;
    static const char *names[2] = {"putmem_signal", "p_quiet_signal"};

    for (int variant = 0; variant < 2; ++variant) {
        CUDA_CHECK(cudaMemset(dest, 0, buf_bytes));
        CUDA_CHECK(cudaMemset(result, 0, sizeof *result));
        CUDA_CHECK(cudaDeviceSynchronize());
        nvshmem_barrier_all();  // signals and destinations are clear everywhere
        LatResult host = {};
        if (me < 2) {
            const int peer = 1 - me;
            const size_t size = variant == kPutmemSignal ? o.lat_size : 8;
            if (variant == kPutmemSignal)
                pingpong_kernel<kPutmemSignal><<<1, 1, 0, stream>>>(dest, src, sigs + 0, size, peer, me == 0,
                                                                    o.warmup, (int)o.iters, timeout_ns, result);
            else
                pingpong_kernel<kPQuietSignal><<<1, 1, 0, stream>>>(dest, src, sigs + 1, size, peer, me == 0,
                                                                    o.warmup, (int)o.iters, timeout_ns, result);
            CUDA_CHECK(cudaGetLastError());
            CUDA_CHECK(cudaMemcpyAsync(&host, result, sizeof host, cudaMemcpyDeviceToHost, stream));
            CUDA_CHECK(cudaStreamSynchronize(stream));
            if (host.timed_out) {
                fprintf(stderr,
                        "nvshmem_peer[rank %d]: %s: gave up waiting for round %llu of PE %d after %.1f s "
                        "(is the peer running, and MPS on?)\n",
                        me, names[variant], host.waited_for, peer, o.wait_timeout_s);
                // The peer is gone or stuck: a barrier could hang, so exit without one.
                fflush(stderr);
                _exit(kWaitTimeout);
            }
            if (host.bad_data) {
                fprintf(stderr, "nvshmem_peer[rank %d]: %s: last payload was %llu, expected %llu\n", me,
                        names[variant], host.last_seen, (unsigned long long)(o.warmup + o.iters));
                status = kDataError;
            }
            if (me == 0) {
                double one_way_us = (double)host.elapsed_ns * 1e-3 / (2.0 * (double)o.iters);
                rows.push_back(fmt("{\"size\": %zu, \"iters\": %ld, \"one_way_us\": %s, \"variant\": \"%s\", "
                                   "\"warmup\": %d}",
                                   size, o.iters, json_number(one_way_us).c_str(), names[variant], o.warmup));
            }
        }
        nvshmem_barrier_all();
    }

    CUDA_CHECK(cudaStreamDestroy(stream));
    CUDA_CHECK(cudaFree(result));
    nvshmem_free(sigs);
    nvshmem_free(dest);
    nvshmem_free(src);
    return status;
}

void set_default_env(const char *name, const char *value) {
    if (setenv(name, value, /*overwrite=*/0) != 0) die(kFailure, "setenv %s: %s", name, strerror(errno));
}

}  // namespace

int main(int argc, char **argv) {
    Options o = parse(argc, argv);
    if (o.watchdog_s > 0) {
        signal(SIGALRM, watchdog_expired);
        alarm((unsigned)std::max(1.0, o.watchdog_s + 0.5));
    }

    // One host, P2P between processes on one GPU: keep the bootstrap on loopback, skip the network
    // transports and NCCL, and take full multi-PE-per-GPU support under MPS even without
    // CUDA_MPS_ACTIVE_THREAD_PERCENTAGE. Anything the caller set wins.
    set_default_env("NVSHMEM_BOOTSTRAP_UID_SOCK_IFNAME", "lo");
    set_default_env("NVSHMEM_REMOTE_TRANSPORT", "none");
    set_default_env("NVSHMEM_DISABLE_NCCL", "1");
    set_default_env("NVSHMEM_IGNORE_CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "1");
    {
        size_t largest = o.mode == "bw" ? *std::max_element(o.sizes.begin(), o.sizes.end()) : o.lat_size;
        // Source + destination + room for NVSHMEM's own allocations, in whole 2 MiB pages.
        size_t heap = (2 * largest + ((size_t)256 << 20) + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
        std::string text = std::to_string(heap);
        set_default_env("NVSHMEM_SYMMETRIC_SIZE", text.c_str());
    }

    nvshmemx_uniqueid_t uid = exchange_unique_id(o);

    int device = 0;
    if (const char *env = getenv("NVSHMEM_PEER_DEVICE"); env && *env)
        device = (int)parse_int(env, "NVSHMEM_PEER_DEVICE", 0, 1023);
    CUDA_CHECK(cudaSetDevice(device));
    CUDA_CHECK(cudaFree(nullptr));  // create the context (and attach to MPS) before NVSHMEM does
    nvshmemx_init_attr_t attr = NVSHMEMX_INIT_ATTR_INITIALIZER;
    NVSHMEM_CHECK(nvshmemx_set_attr_uniqueid_args(o.rank, o.nranks, &uid, &attr));
    NVSHMEM_CHECK(nvshmemx_init_attr(NVSHMEMX_INIT_WITH_UNIQUEID, &attr));
    const int me = nvshmem_my_pe();
    const int npes = nvshmem_n_pes();
    if (me != o.rank || npes != o.nranks)
        die(kFailure, "NVSHMEM says PE %d of %d, expected %d of %d", me, npes, o.rank, o.nranks);

    int major = 0, minor = 0, patch = 0;
    nvshmemx_vendor_get_version_info(&major, &minor, &patch);
    std::string version = fmt("%d.%d.%d", major, minor, patch);
    int sm_count = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&sm_count, cudaDevAttrMultiProcessorCount, device));
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, device));

    std::vector<std::string> rows;
    int status = kOk;
    int blocks_used = 0;
    std::string scope_json = "null";
    if (o.mode == "bw") {
        std::string scopes;
        for (size_t i = 0; i < o.scopes.size(); ++i) scopes += (i ? "," : "") + o.scopes[i];
        scope_json = "\"" + scopes + "\"";
        if (run_bw(o, me, npes, sm_count, rows, blocks_used) != 0) status = kDataError;
    } else {
        status = run_lat(o, me, rows);
    }

    std::string json = "{\"peer\": \"nvshmem\", \"version\": \"" + version + "\", \"mode\": \"" + o.mode +
                       "\", \"scope\": " + scope_json + fmt(", \"rank\": %d, \"nranks\": %d", me, npes) +
                       fmt(", \"device\": %d, \"device_name\": \"%s\", \"sm_count\": %d", device,
                           json_escape(prop.name).c_str(), sm_count) +
                       (o.mode == "bw" ? fmt(", \"max_blocks\": %d, \"threads\": %d", blocks_used, o.threads) : "") +
                       ", \"rows\": [";
    for (size_t i = 0; i < rows.size(); ++i) json += (i ? ", " : "") + rows[i];
    json += "]}\n";
    write_atomically(o.out_json, json.data(), json.size());

    nvshmem_finalize();
    return status;
}
