/* The compiled send engine: the per-packet loop of a paced UDP sender (agents/send_engine.py).
 *
 * Why it exists: a paced Python sender costs ~90 us of CPU per packet (the interpreter, and
 * spinning the last 200 us before each deadline); this one sleeps to each deadline with
 * clock_nanosleep(TIMER_ABSTIME) at 1 ns timer slack and sends what is due with one sendmmsg,
 * so a packet costs its system calls and nothing spins. What remains is mostly the wake-up per
 * deadline (tens of microseconds on a virtual machine), shared by the packets due together.
 *
 * It is not started by hand: the agent builds the packets (headers packed by the declared wire
 * formats) and their deadlines, and hands them on stdin, one record a packet, big-endian (so a
 * record and the header after it pack in one step):
 *
 *   int64 deadline_ns (CLOCK_MONOTONIC)  uint32 group  uint16 size  uint16 length  bytes[length]
 *
 * The datagram is the length bytes then zeros up to size. Just before sending, the engine
 * writes each packet's sequence number (uint32, big-endian, counting every attempt from 0) at
 * --sequence-offset and the send time (uint64 big-endian CLOCK_REALTIME ns, the wire formats'
 * timestamps) at --timestamp-offset. A group is what the agent calls it (a frame): when a send
 * is refused (ECONNREFUSED: nobody listened), the rest of its group is still sent, then the
 * engine prints "R <group>" and drops every record until a record of group RESUME, after which
 * the agent sends what follows the refusal (a media sender restarts its GOP).
 *
 * At the end of stdin it sends what is left; at SIGTERM or SIGINT it stops before the next
 * packet. Either way it prints "E <sent> <bytes> <send_errors> <last_group> <last_send_ns>"
 * (last_group -1 and last_send_ns 0 when none), then "L <n>" and the lateness of its n send
 * attempts (int64 ns, host order): how long after its deadline each woke to be sent.
 */
#define _GNU_SOURCE
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define BATCH 64
#define DATAGRAM_MAX 65535
#define RESUME 0xFFFFFFFFu
#define INPUT_BYTES (1 << 20)

typedef struct __attribute__((packed)) {
    int64_t deadline_ns;
    uint32_t group;
    uint16_t size;
    uint16_t length;
} record_t;

static volatile sig_atomic_t stopping;
static void stop(int signum) { (void)signum; stopping = 1; }

static unsigned char input[INPUT_BYTES];
static size_t input_start, input_end;
static int input_ended;

static int64_t now_ns(clockid_t clock) {
    struct timespec t;
    clock_gettime(clock, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Reads what stdin has, waiting for it when wait is set; 0 once stdin ended or a signal came. */
static int fill(int wait) {
    if (input_ended)
        return 0;
    if (input_start > 0) {
        memmove(input, input + input_start, input_end - input_start);
        input_end -= input_start;
        input_start = 0;
    }
    while (!stopping) {
        ssize_t got = read(0, input + input_end, INPUT_BYTES - input_end);
        if (got > 0) {
            input_end += (size_t)got;
            return 1;
        }
        if (got == 0) {
            input_ended = 1;
            return 0;
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            break;
        if (!wait)
            return 1;
        struct pollfd readable = {.fd = 0, .events = POLLIN};
        poll(&readable, 1, -1);
    }
    return 0;
}

static record_t current;

/* The next whole record, decoded (its bytes follow it in input), or NULL when none is there
 * and, with wait, none will come. */
static const record_t *peek(int wait) {
    for (;;) {
        size_t have = input_end - input_start;
        if (have >= sizeof(record_t)) {
            memcpy(&current, input + input_start, sizeof current);
            current.deadline_ns = (int64_t)be64toh((uint64_t)current.deadline_ns);
            current.group = be32toh(current.group);
            current.size = be16toh(current.size);
            current.length = be16toh(current.length);
            if (have >= sizeof(record_t) + current.length)
                return &current;
        }
        if (have == INPUT_BYTES || !fill(wait) || (!wait && input_end - input_start == have))
            return NULL;
    }
}

static void take(const record_t *r) { input_start += sizeof(record_t) + r->length; }

/* Growing list of every attempt's lateness. */
static int64_t *lateness;
static size_t lateness_count, lateness_capacity;

static void record_lateness(int64_t late) {
    if (lateness_count == lateness_capacity) {
        lateness_capacity = lateness_capacity ? 2 * lateness_capacity : 65536;
        lateness = realloc(lateness, lateness_capacity * sizeof *lateness);
        if (!lateness) {
            perror("send engine");
            exit(1);
        }
    }
    lateness[lateness_count++] = late;
}

static void put_be(unsigned char *at, uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; i--, value >>= 8)
        at[i] = (unsigned char)value;
}

static void usage(void) {
    fprintf(stderr, "usage: edgebed-send-engine --socket FD --sequence-offset N "
                    "--timestamp-offset N\n");
    exit(2);
}

int main(int argc, char **argv) {
    int sock = -1;
    long sequence_offset = -1, timestamp_offset = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        long value = strtol(argv[i + 1], NULL, 10);
        if (!strcmp(argv[i], "--socket"))
            sock = (int)value;
        else if (!strcmp(argv[i], "--sequence-offset"))
            sequence_offset = value;
        else if (!strcmp(argv[i], "--timestamp-offset"))
            timestamp_offset = value;
        else
            usage();
    }
    if (argc % 2 == 0 || sock < 0 || sequence_offset < 0 || timestamp_offset < 0)
        usage();
    struct sigaction action = {.sa_handler = stop};  /* no SA_RESTART: sleeps end at once */
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGINT, &action, NULL);
    prctl(PR_SET_TIMERSLACK, 1UL);  /* wake at the deadline, not up to 50 us after it */
    fcntl(0, F_SETFL, fcntl(0, F_GETFL) | O_NONBLOCK);

    static unsigned char packets[BATCH][DATAGRAM_MAX];
    struct iovec iov[BATCH];
    struct mmsghdr messages[BATCH];
    uint64_t attempts = 0, sent = 0, bytes = 0, errors = 0;
    int64_t last_group = -1, last_send_ns = 0, refused_group = -1;

    while (!stopping) {
        const record_t *next = peek(1);
        if (next == NULL)
            break;
        if (refused_group >= 0 && next->group != (uint32_t)refused_group) {
            printf("R %lld\n", (long long)refused_group);
            fflush(stdout);
            refused_group = -1;
            while ((next = peek(1)) != NULL && next->group != RESUME)
                take(next);
            if (next == NULL)
                break;
        }
        if (next->group == RESUME) {
            take(next);
            continue;
        }
        struct timespec due = {next->deadline_ns / 1000000000, next->deadline_ns % 1000000000};
        while (!stopping && clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, NULL) == EINTR)
            ;
        if (stopping)
            break;
        /* What of this group is due by now goes in one batch; one group a batch, so that a
         * refusal drops every group after it. */
        int64_t woke = now_ns(CLOCK_MONOTONIC), stamp = now_ns(CLOCK_REALTIME);
        uint32_t group = next->group;
        int count = 0;
        while (count < BATCH && (next = peek(count == 0)) != NULL && next->group == group
               && next->deadline_ns <= woke) {
            unsigned char *packet = packets[count];
            size_t length = next->length < next->size ? next->length : next->size;
            memcpy(packet, input + input_start + sizeof(record_t), length);
            memset(packet + length, 0, next->size - length);
            if ((size_t)sequence_offset + 4 <= next->size)
                put_be(packet + sequence_offset, attempts + (uint64_t)count, 4);
            if ((size_t)timestamp_offset + 8 <= next->size)
                put_be(packet + timestamp_offset, (uint64_t)stamp, 8);
            iov[count] = (struct iovec){packet, next->size};
            messages[count].msg_hdr = (struct msghdr){.msg_iov = &iov[count], .msg_iovlen = 1};
            record_lateness(woke - next->deadline_ns);
            take(next);
            count++;
        }
        for (int i = 0; i < count;) {
            int done = sendmmsg(sock, messages + i, (unsigned)(count - i), 0);
            if (done < 0) {
                if (errno == EINTR)
                    continue;
                errors++;  /* this packet is lost; a receiver sees the gap */
                if (errno == ECONNREFUSED)
                    refused_group = group;
                done = 1;
            } else {
                for (int j = i; j < i + done; j++)
                    bytes += iov[j].iov_len;
                sent += (uint64_t)done;
                last_send_ns = now_ns(CLOCK_MONOTONIC);
            }
            i += done;
        }
        if (count > 0) {
            attempts += (uint64_t)count;
            last_group = group;
        }
    }
    /* The figures go out whole: a second stop signal must not cut their write short. */
    sigset_t stops;
    sigemptyset(&stops);
    sigaddset(&stops, SIGTERM);
    sigaddset(&stops, SIGINT);
    sigprocmask(SIG_BLOCK, &stops, NULL);
    if (refused_group >= 0)
        printf("R %lld\n", (long long)refused_group);
    printf("E %llu %llu %llu %lld %lld\nL %zu\n", (unsigned long long)sent,
           (unsigned long long)bytes, (unsigned long long)errors, (long long)last_group,
           (long long)last_send_ns, lateness_count);
    fflush(stdout);
    if (lateness_count && fwrite(lateness, sizeof *lateness, lateness_count, stdout)
        != lateness_count) {
        perror("edgebed-send-engine: writing the lateness");
        return 1;
    }
    if (fflush(stdout)) {
        perror("edgebed-send-engine: writing the figures");
        return 1;
    }
    return 0;
}
