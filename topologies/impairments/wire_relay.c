/* The compiled wire relay: the data plane of topologies/impairments/wire.py in C.
 *
 * Why it exists: the Python relay spends ~50 us of interpreter per frame, so on the 2-core
 * reference machine its delay error passes 1 ms at ~7,500 frames/s per direction. This one reads
 * and sends in batches (recvmmsg/sendmmsg, one system call per up to BATCH frames), keeps frames
 * in a binary heap of due times, and when busy wakes once per quantum rather than once per frame
 * (QUANTUM_NS below), so a frame costs a few microseconds.
 *
 * It is not started by hand: `python -m topologies.impairments.wire --compiled` validates the
 * configuration and every change with the same pydantic models as the Python relay, then hands
 * this program already-checked numbers on its stdin, one command a line:
 *
 *   D <dir> <delay_ns> <jitter_ns> <distribution> <reorder> <loss> <burst> <p> <r> <bad_loss>
 *     <good_loss> <down> <limit>      set direction dir (0 forward, 1 reverse); distribution 0
 *                                     normal, 1 uniform, 2 table (pareto, paretonormal); burst 0/1
 *   T <dir> <v0> ... <v4095>          the distribution table (netem's, rescaled by wire.py)
 *   S <seed>                          reseed both directions
 *   A <n>                             print {"applied": n} (after the lines before it applied)
 *   G                                 the initial configuration is complete: start forwarding
 *
 * Semantics are the Python relay's (same drop causes in the same order, same due-time rule for
 * reorder, same limit, same lateness histogram and statistics JSON); the random sequence is
 * this program's own (xoshiro256**, seeded from the seed and the direction), so a seed gives
 * the same distributions, not the same draws.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/if_packet.h>
#include <math.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif
#define BATCH 64
/* Larger than any frame a veth carries (MTU 65535 plus Ethernet header plus a VLAN tag). */
#define FRAME_MAX (1 << 17)
#define RECEIVE_BUFFER_BYTES (16 << 20)
#define TABLE_SIZE 4096
#define TIMESTAMP_TRUST_NS 1000000000LL
/* Busy, the relay wakes at most once per quantum (--quantum-us) and takes everything that came
 * or fell due meanwhile in one batch: one wake-up, one recvmmsg, one sendmmsg for several frames
 * instead of each. Why: at 50k frames/s per direction a wake-up per frame (or spinning between
 * frames 20 us apart, as wire.py does) takes a whole core at real-time priority from the
 * emulated hosts and Open vSwitch on a 2-core machine, and they then drop what the relay would
 * have delivered on time. The price is lateness below the quantum, only while frames come
 * closer than it; idle, a frame wakes the relay at once and its due time wakes it on time
 * (ppoll's nanoseconds, no timer slack under SCHED_FIFO). */
#define QUANTUM_NS 50000LL
#define STATUS_PERIOD_NS 1000000000LL
/* Lateness buckets: exact below 1024 us, then 512 per power of two (10 significant bits). */
#define EXACT 1024
#define BUCKETS (EXACT + 54 * 512)

typedef struct {
    uint64_t s[4];
} rng_t;

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng_t *r) {
    uint64_t *s = r->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rotl(s[3], 45);
    return result;
}

/* Uniform in [0, 1). */
static double rng_random(rng_t *r) { return (rng_next(r) >> 11) * 0x1.0p-53; }

static void rng_seed(rng_t *r, long long seed, int direction) {
    uint64_t x = (uint64_t)seed * 0x9E3779B97F4A7C15ULL ^ (uint64_t)(direction + 1) << 32;
    for (int i = 0; i < 4; i++) { /* splitmix64 */
        uint64_t z = (x += 0x9E3779B97F4A7C15ULL);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        r->s[i] = z ^ (z >> 31);
    }
}

typedef struct {
    long long delay_ns, jitter_ns, limit, last_due_ns, queued, max_queued;
    int distribution, reorder, burst, down, burst_bad, fd, ifindex;
    double loss, p, r, bad_loss, good_loss, table[TABLE_SIZE];
    rng_t rng;
    unsigned long long frames_in, frames_out, dropped_loss, dropped_down, dropped_oversize,
        dropped_queue_full, dropped_receive_queue, send_errors;
    unsigned long long late_counts[BUCKETS], late_frames, late_max;
    unsigned __int128 late_sum, late_squares;
} direction_t;

typedef struct {
    long long due;
    unsigned long long order;
    int direction, size;
    unsigned char *frame;
} entry_t;

static direction_t directions[2];
static entry_t *heap;
static size_t heap_size, heap_capacity;
static unsigned long long arrivals;
static volatile sig_atomic_t stopping;

static long long monotonic_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long long realtime_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static int earlier(const entry_t *a, const entry_t *b) {
    return a->due < b->due || (a->due == b->due && a->order < b->order);
}

static void heap_push(entry_t e) {
    if (heap_size == heap_capacity) {
        heap_capacity = heap_capacity ? heap_capacity * 2 : 4096;
        heap = realloc(heap, heap_capacity * sizeof *heap);
        if (!heap) { perror("wire: heap"); exit(1); }
    }
    size_t i = heap_size++;
    while (i > 0 && earlier(&e, &heap[(i - 1) / 2])) { heap[i] = heap[(i - 1) / 2]; i = (i - 1) / 2; }
    heap[i] = e;
}

static entry_t heap_pop(void) {
    entry_t top = heap[0], last = heap[--heap_size];
    size_t i = 0;
    for (;;) {
        size_t child = 2 * i + 1;
        if (child >= heap_size) break;
        if (child + 1 < heap_size && earlier(&heap[child + 1], &heap[child])) child++;
        if (!earlier(&heap[child], &last)) break;
        heap[i] = heap[child];
        i = child;
    }
    if (heap_size) heap[i] = last;
    return top;
}

static void late_add(direction_t *d, unsigned long long late_us) {
    d->late_frames++;
    d->late_sum += late_us;
    d->late_squares += (unsigned __int128)late_us * late_us;
    if (late_us > d->late_max) d->late_max = late_us;
    size_t index = late_us;
    if (late_us >= EXACT) {
        int shift = 64 - __builtin_clzll(late_us) - 10;
        index = EXACT + (size_t)(shift - 1) * 512 + ((late_us >> shift) - 512);
    }
    d->late_counts[index]++;
}

static unsigned long long bucket_value(size_t index) {
    if (index < EXACT) return index;
    int shift = (int)((index - EXACT) / 512) + 1;
    return (unsigned long long)((index - EXACT) % 512 + 512) << shift;
}

static long long late_percentile(direction_t *d, double fraction) {
    unsigned long long rank = (unsigned long long)ceil(fraction * d->late_frames), seen = 0;
    for (size_t i = 0; i < BUCKETS; i++)
        if ((seen += d->late_counts[i]) >= rank && d->late_counts[i]) return (long long)bucket_value(i);
    return (long long)d->late_max;
}

static double variation(direction_t *d) {
    if (d->distribution == 0) { /* Box-Muller: one standard normal draw */
        double u = 1.0 - rng_random(&d->rng), v = rng_random(&d->rng);
        return sqrt(-2.0 * log(u)) * cos(2.0 * M_PI * v);
    }
    if (d->distribution == 1) return (2.0 * rng_random(&d->rng) - 1.0) * sqrt(3.0);
    return d->table[(int)(rng_random(&d->rng) * TABLE_SIZE)];
}

static int lost(direction_t *d) {
    if (d->burst) {
        int dropped;
        if (d->burst_bad) {
            dropped = rng_random(&d->rng) < d->bad_loss;
            d->burst_bad = rng_random(&d->rng) >= d->r;
        } else {
            dropped = rng_random(&d->rng) < d->good_loss;
            d->burst_bad = rng_random(&d->rng) < d->p;
        }
        if (dropped) return 1;
    }
    return d->loss > 0 && rng_random(&d->rng) < d->loss;
}

/* When a frame arriving at arrival_ns leaves, or -1 when it is dropped (wire.py Direction.due). */
static long long due_time(direction_t *d, long long arrival_ns) {
    d->frames_in++;
    if (d->down) { d->dropped_down++; return -1; }
    if ((d->burst || d->loss > 0) && lost(d)) { d->dropped_loss++; return -1; }
    if (d->queued >= d->limit) { d->dropped_queue_full++; return -1; }
    long long delay = d->delay_ns;
    if (d->jitter_ns) {
        delay += llround(d->jitter_ns * variation(d));
        if (delay < 0) delay = 0;
    }
    long long due = arrival_ns + delay;
    if (due < d->last_due_ns) {
        if (!d->reorder) due = d->last_due_ns;
    } else {
        d->last_due_ns = due;
    }
    if (++d->queued > d->max_queued) d->max_queued = d->queued;
    return due;
}

static void count_receive_drops(direction_t *d) {
    struct tpacket_stats stats;
    socklen_t size = sizeof stats;
    if (getsockopt(d->fd, SOL_PACKET, PACKET_STATISTICS, &stats, &size) == 0)
        d->dropped_receive_queue += stats.tp_drops;
}

/* An exact whole number (the sums outgrow a double's 53 bits on long runs). */
static void print_u128(FILE *out, unsigned __int128 value) {
    char digits[40];
    int length = 0;
    do { digits[length++] = (char)('0' + (int)(value % 10)); value /= 10; } while (value);
    while (length) fputc(digits[--length], out);
}

static void print_statistics(FILE *out) {
    static const char *names[2] = {"forward", "reverse"};
    fputc('{', out);
    for (int i = 0; i < 2; i++) {
        direction_t *d = &directions[i];
        count_receive_drops(d);
        fprintf(out, "%s\"%s\": {\"frames_in\": %llu, \"frames_out\": %llu, \"dropped_loss\": %llu, "
                "\"dropped_down\": %llu, \"dropped_oversize\": %llu, \"dropped_queue_full\": %llu, "
                "\"dropped_receive_queue\": %llu, \"send_errors\": %llu, \"queued_at_exit\": %lld, "
                "\"max_queued\": %lld, \"late_us\": ",
                i ? ", " : "", names[i], d->frames_in, d->frames_out, d->dropped_loss,
                d->dropped_down, d->dropped_oversize, d->dropped_queue_full,
                d->dropped_receive_queue, d->send_errors, d->queued, d->max_queued);
        if (!d->late_frames) {
            fprintf(out, "{\"mean\": null, \"std\": null, \"p50\": null, \"p99\": null, "
                    "\"max\": null, \"sum\": 0, \"sum_squares\": 0}}");
            continue;
        }
        double n = (double)d->late_frames, sum = (double)d->late_sum;
        double variance = (n * (double)d->late_squares - sum * sum) / (n * n);
        /* %.17g: the mean read back is exactly sum / frames, as the Python relay's. */
        fprintf(out, "{\"mean\": %.17g, \"std\": %.17g, \"p50\": %lld, \"p99\": %lld, \"max\": %llu, "
                "\"sum\": ", sum / n, sqrt(variance > 0 ? variance : 0), late_percentile(d, 0.5),
                late_percentile(d, 0.99), d->late_max);
        print_u128(out, d->late_sum);
        fputs(", \"sum_squares\": ", out);
        print_u128(out, d->late_squares);
        fputs("}}", out);
    }
    fputs("}\n", out);
    fflush(out);
}

static void write_status(const char *path) {
    char temporary[4096];
    snprintf(temporary, sizeof temporary, "%s.tmp", path);
    FILE *out = fopen(temporary, "w");
    if (!out) { perror("wire: status"); return; }
    print_statistics(out);
    fclose(out);
    if (rename(temporary, path)) perror("wire: status");
}

static int open_interface(const char *name, int *ifindex) {
    /* Protocol 0 until bind, so no frame of another interface is queued first. */
    int fd = socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK, 0), one = 1, size = RECEIVE_BUFFER_BYTES;
    if (fd < 0) return -1;
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    /* The kernel moves the outer VLAN tag into metadata; auxdata hands it back. */
    setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof size);
    setsockopt(fd, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof one);
    *ifindex = (int)if_nametoindex(name);
    struct sockaddr_ll address = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL),
                                  .sll_ifindex = *ifindex};
    if (!*ifindex || bind(fd, (struct sockaddr *)&address, sizeof address)) return -1;
    struct packet_mreq membership = {.mr_ifindex = *ifindex, .mr_type = PACKET_MR_PROMISC};
    setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &membership, sizeof membership);
    return fd;
}

static unsigned char buffers[BATCH][FRAME_MAX];
static char controls[BATCH][CMSG_SPACE(sizeof(struct timespec)) + CMSG_SPACE(sizeof(struct tpacket_auxdata))];

/* Queue up to `limit` frames waiting on direction i's interface; the frames read. */
static int receive(int i, int limit) {
    direction_t *d = &directions[i];
    struct mmsghdr messages[BATCH];
    struct iovec vectors[BATCH];
    int wanted = limit < BATCH ? limit : BATCH;
    for (int k = 0; k < wanted; k++) {
        /* 4 bytes of room at the front for a VLAN tag put back. */
        vectors[k] = (struct iovec){buffers[k] + 4, FRAME_MAX - 4};
        messages[k].msg_hdr = (struct msghdr){.msg_iov = &vectors[k], .msg_iovlen = 1,
                                              .msg_control = controls[k],
                                              .msg_controllen = sizeof controls[k]};
    }
    int count = recvmmsg(d->fd, messages, wanted, MSG_TRUNC, NULL);
    if (count <= 0) {
        if (count < 0 && errno != EAGAIN && errno != EINTR) fprintf(stderr, "wire: %s: %s\n", i ? "reverse" : "forward", strerror(errno));
        return 0;
    }
    long long now = monotonic_ns(), offset = realtime_ns() - now;
    for (int k = 0; k < count; k++) {
        struct msghdr *header = &messages[k].msg_hdr;
        unsigned int size = messages[k].msg_len;
        if (header->msg_flags & MSG_TRUNC || size > FRAME_MAX - 4) {
            d->frames_in++; d->dropped_oversize++; continue;
        }
        long long arrival = now;
        int tagged = 0;
        uint16_t tpid = 0, tci = 0;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(header); c; c = CMSG_NXTHDR(header, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_TIMESTAMPNS) {
                struct timespec t;
                memcpy(&t, CMSG_DATA(c), sizeof t);
                long long stamped = t.tv_sec * 1000000000LL + t.tv_nsec - offset;
                if (now - TIMESTAMP_TRUST_NS < stamped && stamped <= now) arrival = stamped;
            } else if (c->cmsg_level == SOL_PACKET && c->cmsg_type == PACKET_AUXDATA) {
                struct tpacket_auxdata aux;
                memcpy(&aux, CMSG_DATA(c), sizeof aux);
                if (aux.tp_status & TP_STATUS_VLAN_VALID) {
                    tagged = 1;
                    tci = aux.tp_vlan_tci;
                    tpid = aux.tp_status & TP_STATUS_VLAN_TPID_VALID ? aux.tp_vlan_tpid : 0x8100;
                }
            }
        }
        long long due = due_time(d, arrival);
        if (due < 0) continue;
        unsigned char *data = buffers[k] + 4;
        int length = (int)size;
        if (tagged && size >= 12) {
            memmove(buffers[k], data, 12);
            uint16_t tag[2] = {htons(tpid), htons(tci)};
            memcpy(buffers[k] + 12, tag, 4);
            data = buffers[k];
            length += 4;
        }
        unsigned char *frame = malloc(length);
        if (!frame) { d->queued--; d->dropped_queue_full++; continue; }
        memcpy(frame, data, length);
        heap_push((entry_t){due, arrivals++, i, length, frame});
    }
    return count;
}

/* Send every frame that is due, in batches per direction; how many were due. */
static int send_due(void) {
    int handled = 0;
    for (;;) {
        long long now = monotonic_ns();
        if (!heap_size || heap[0].due > now) return handled;
        struct mmsghdr messages[BATCH];
        struct iovec vectors[BATCH];
        entry_t batch[BATCH];
        int count = 0, i = heap[0].direction;
        /* One direction per batch (one socket per sendmmsg); order within it is kept. */
        while (count < BATCH && heap_size && heap[0].due <= now && heap[0].direction == i) {
            batch[count] = heap_pop();
            vectors[count] = (struct iovec){batch[count].frame, (size_t)batch[count].size};
            messages[count].msg_hdr = (struct msghdr){.msg_iov = &vectors[count], .msg_iovlen = 1};
            count++;
        }
        direction_t *d = &directions[i];
        direction_t *out = &directions[1 - i];
        int sent = 0;
        while (sent < count) {
            int n = sendmmsg(out->fd, messages + sent, count - sent, 0);
            if (n <= 0) {
                /* ENOBUFS from a full qdisc, ENETDOWN: this frame is lost, as on a wire. */
                if (n < 0 && errno == EINTR) continue;
                d->send_errors++;
                batch[sent].size = -1;
                sent++;
                continue;
            }
            sent += n;
        }
        long long after = monotonic_ns();
        handled += count;
        for (int k = 0; k < count; k++) {
            d->queued--;
            if (batch[k].size >= 0) {
                d->frames_out++;
                late_add(d, (unsigned long long)(after - batch[k].due) / 1000);
            }
            free(batch[k].frame);
        }
    }
}

static char line_buffer[1 << 20];
static size_t line_length;
static int stdin_open = 1, started;

static void command(char *line) {
    char *rest;
    int i;
    switch (line[0]) {
    case 'D': {
        direction_t *d;
        i = (int)strtol(line + 1, &rest, 10);
        d = &directions[i & 1];
        int burst;
        if (sscanf(rest, "%lld %lld %d %d %lf %d %lf %lf %lf %lf %d %lld", &d->delay_ns,
                   &d->jitter_ns, &d->distribution, &d->reorder, &d->loss, &burst, &d->p, &d->r,
                   &d->bad_loss, &d->good_loss, &d->down, &d->limit) != 12) {
            fprintf(stderr, "wire: bad command: %s\n", line);
            exit(2);
        }
        if (!burst) d->burst_bad = 0;
        d->burst = burst;
        break;
    }
    case 'T':
        i = (int)strtol(line + 1, &rest, 10);
        for (int k = 0; k < TABLE_SIZE; k++) directions[i & 1].table[k] = strtod(rest, &rest);
        break;
    case 'S': {
        long long seed = strtoll(line + 1, NULL, 10);
        for (i = 0; i < 2; i++) rng_seed(&directions[i].rng, seed, i);
        break;
    }
    case 'G':
        started = 1;
        break;
    case 'A':
        printf("{\"applied\": %s}\n", line + 2);
        fflush(stdout);
        break;
    }
}

static void read_commands(void) {
    ssize_t n = read(0, line_buffer + line_length, sizeof line_buffer - line_length - 1);
    if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) stdin_open = 0;
        return;
    }
    line_length += (size_t)n;
    char *start = line_buffer, *end;
    while ((end = memchr(start, '\n', line_buffer + line_length - start))) {
        *end = 0;
        /* Frames waiting in the sockets arrived before the change was read. */
        if (start[0] == 'D') for (int i = 0; i < 2; i++) while (receive(i, BATCH) == BATCH);
        command(start);
        start = end + 1;
    }
    line_length -= (size_t)(start - line_buffer);
    memmove(line_buffer, start, line_length);
}

static void stop(int signum) { (void)signum; stopping = 1; }

int main(int argc, char **argv) {
    const char *forward_in = NULL, *forward_out = NULL, *status = NULL;
    int priority = 10;
    long long quantum_ns = QUANTUM_NS;
    for (int k = 1; k + 1 < argc; k += 2) {
        if (!strcmp(argv[k], "--forward-in")) forward_in = argv[k + 1];
        else if (!strcmp(argv[k], "--forward-out")) forward_out = argv[k + 1];
        else if (!strcmp(argv[k], "--status")) status = argv[k + 1];
        else if (!strcmp(argv[k], "--realtime-priority")) priority = atoi(argv[k + 1]);
        else if (!strcmp(argv[k], "--quantum-us")) quantum_ns = atoll(argv[k + 1]) * 1000LL;
    }
    if (!forward_in || !forward_out) {
        fprintf(stderr, "usage: %s --forward-in IF --forward-out IF [--status FILE] "
                "[--realtime-priority N] [--quantum-us N] < commands\n", argv[0]);
        return 2;
    }
    for (int i = 0; i < 2; i++) {
        directions[i].limit = 100000;
        rng_seed(&directions[i].rng, 0, i);
    }
    if (priority > 0) {
        struct sched_param parameter = {.sched_priority = priority};
        if (sched_setscheduler(0, SCHED_FIFO, &parameter)) perror("normal scheduling");
    }
    /* Without SCHED_FIFO (no permission) timers would fire up to 50 us late by default. */
    prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    /* The front (wire.py) is the relay's only reader and the only one that stops it: killed
     * (SIGKILL, a crashed test), it cannot pass SIGTERM on, and the relay lived on with its
     * namespace gone. Its death now stops the relay as SIGTERM does. */
    pid_t front = getppid();
    prctl(PR_SET_PDEATHSIG, SIGTERM, 0UL, 0UL, 0UL);
    if (getppid() != front) return 1;  /* the front died before the line above */
    struct sigaction action = {.sa_handler = stop};
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    /* The stopping signals are taken only inside ppoll, which unblocks them atomically: one
     * arriving anywhere else in the loop would set `stopping` after it was checked, and on an
     * idle wire (nothing queued, no status file) the next ppoll would then wait forever. */
    sigset_t stopping_signals, waiting_mask;
    sigemptyset(&stopping_signals);
    sigaddset(&stopping_signals, SIGTERM);
    sigaddset(&stopping_signals, SIGINT);
    sigprocmask(SIG_BLOCK, &stopping_signals, &waiting_mask);
    sigdelset(&waiting_mask, SIGTERM);
    sigdelset(&waiting_mask, SIGINT);
    directions[0].fd = open_interface(forward_in, &directions[0].ifindex);
    directions[1].fd = open_interface(forward_out, &directions[1].ifindex);
    if (directions[0].fd < 0 || directions[1].fd < 0) {
        fprintf(stderr, "wire: cannot open %s and %s: %s\n", forward_in, forward_out, strerror(errno));
        return 1;
    }
    /* The configuration comes first on stdin (blocking): no frame leaves under defaults. */
    while (stdin_open && !started && !stopping) {
        struct pollfd commands = {0, POLLIN, 0};
        if (ppoll(&commands, 1, NULL, &waiting_mask) > 0) read_commands();
    }
    long long next_status = monotonic_ns(), woke = next_status;
    while (!stopping) {
        int worked = 0;
        /* Whatever waits in the sockets, a flood on one side only so long (4 batches) that the
         * other side's due frames are not held back. */
        for (int i = 0; i < 2; i++)
            for (int rounds = 0, got = BATCH; rounds < 4 && got == BATCH; rounds++)
                worked += got = receive(i, BATCH);
        worked += send_due();
        long long now = monotonic_ns();
        if (status && now >= next_status) {
            write_status(status);
            next_status = now + STATUS_PERIOD_NS;
        }
        /* Busy: rest the quantum out, the sockets holding what comes meanwhile (changes on
         * stdin are still taken at once). Idle: wait for a frame, a change or a due time. */
        int busy = worked && quantum_ns > 0 && now < woke + quantum_ns;
        long long wait = status ? next_status - now : -1;
        if (busy) {
            wait = woke + quantum_ns - now;
        } else if (heap_size) {
            long long until = heap[0].due - now;
            if (until < 0) until = 0;
            if (wait < 0 || until < wait) wait = until;
        }
        struct pollfd p[3] = {{stdin_open ? 0 : -1, POLLIN, 0}, {directions[0].fd, POLLIN, 0},
                              {directions[1].fd, POLLIN, 0}};
        struct timespec timeout = {wait / 1000000000LL, wait % 1000000000LL};
        /* ppoll takes nanoseconds; poll and epoll_wait round up to whole milliseconds. */
        int ready = ppoll(p, busy ? 1 : 3, wait < 0 ? NULL : &timeout, &waiting_mask);
        woke = monotonic_ns();
        if (ready > 0 && p[0].revents) read_commands();
    }
    print_statistics(stdout);
    return 0;
}
