// The floor of a user-space TCP relay on this machine (bench/egress_bench.sh, connect
// section): one thread, level-triggered epoll, accept4, a loopback connect (asked twice, as
// the gateway does, instead of waiting for EPOLLOUT), splice through a pipe per direction
// (pipes pooled), shutdown on EOF, close — the gateway's syscalls for a relayed connection,
// with no destination check, no events, no limits. Whatever it adds to a direct connection
// is what two loopback legs and the extra thread hand-offs cost here, for any relay.
// Only for loopback benchmarks: a pipe it cannot flush is simply waited on (no backpressure
// handling beyond that), and every error closes the connection.
// usage: min_relay LISTEN_PORT TARGET_PORT   (both on 127.0.0.1)
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

struct half {
  int from, to, pr, pw;
  size_t in_pipe;
  int eof, shut;
};
struct conn {
  int a, u, closed;
  struct half up, down;
};

static int ep;
static int pool[64][2], npool;
static struct conn* dead[128];  // closed during an epoll batch: freed after it
static int ndead;

static int take_pipe(int p[2]) {
  if (npool > 0) {
    --npool;
    p[0] = pool[npool][0];
    p[1] = pool[npool][1];
    return 0;
  }
  return pipe2(p, O_NONBLOCK | O_CLOEXEC);
}

static void give_pipe(struct half* h) {
  if (h->in_pipe == 0 && npool < 64) {
    pool[npool][0] = h->pr;
    pool[npool][1] = h->pw;
    ++npool;
    return;
  }
  close(h->pr);
  close(h->pw);
}

static ssize_t flush(struct half* h) {
  ssize_t n = splice(h->pr, NULL, h->to, NULL, h->in_pipe, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
  if (n > 0) h->in_pipe -= (size_t)n;
  return n < 0 && errno != EAGAIN ? -1 : 0;
}

// Reads until a short read (< 16 KiB: drained) or EAGAIN, flushing after each read.
static int pump_half(struct half* h) {
  for (int rounds = 0; rounds < 16; ++rounds) {
    if (h->in_pipe > 0 && flush(h) < 0) return -1;
    if (h->in_pipe > 0 || h->eof) break;
    ssize_t n = splice(h->from, NULL, h->pw, NULL, 262144, SPLICE_F_NONBLOCK | SPLICE_F_MOVE);
    if (n == 0) h->eof = 1;
    if (n < 0 && errno != EAGAIN) return -1;
    if (n > 0) {
      h->in_pipe += (size_t)n;
      if (flush(h) < 0) return -1;
    }
    if (n <= 0 || n < 16384) break;
  }
  if (h->eof && h->in_pipe == 0 && !h->shut) {
    shutdown(h->to, SHUT_WR);
    h->shut = 1;
  }
  return 0;
}

static void finish(struct conn* c) {
  epoll_ctl(ep, EPOLL_CTL_DEL, c->a, NULL);
  epoll_ctl(ep, EPOLL_CTL_DEL, c->u, NULL);
  close(c->a);
  close(c->u);
  give_pipe(&c->up);
  give_pipe(&c->down);
  c->closed = 1;
  dead[ndead++] = c;
}

static void pump(struct conn* c) {
  if (pump_half(&c->up) < 0 || pump_half(&c->down) < 0 || (c->up.shut && c->down.shut)) finish(c);
}

static void watch(int fd, void* p) {
  struct epoll_event e = {.events = EPOLLIN, .data.ptr = p};
  epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e);
}

static void accept_one(int lfd, int tport) {
  const int one = 1;
  int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
  if (fd < 0) return;
  struct conn* c = calloc(1, sizeof *c);
  int pu[2], pd[2];
  if (c == NULL || take_pipe(pu) != 0 || take_pipe(pd) != 0) {
    perror("min_relay");
    exit(1);
  }
  c->a = fd;
  c->u = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  setsockopt(c->u, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  struct sockaddr_in t = {.sin_family = AF_INET, .sin_port = htons(tport), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(c->u, (struct sockaddr*)&t, sizeof t) != 0 && errno == EINPROGRESS) {
    connect(c->u, (struct sockaddr*)&t, sizeof t);
  }
  c->up = (struct half){c->a, c->u, pu[0], pu[1], 0, 0, 0};
  c->down = (struct half){c->u, c->a, pd[0], pd[1], 0, 0, 0};
  watch(c->a, c);
  watch(c->u, c);
  pump(c);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: min_relay LISTEN_PORT TARGET_PORT\n");
    return 2;
  }
  const int one = 1;
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  setsockopt(lfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // inherited by accepted sockets
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1])), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (bind(lfd, (struct sockaddr*)&a, sizeof a) != 0 || listen(lfd, 4096) != 0) {
    perror("min_relay: listen");
    return 1;
  }
  ep = epoll_create1(EPOLL_CLOEXEC);
  watch(lfd, NULL);
  for (;;) {
    struct epoll_event evs[64];
    int n = epoll_wait(ep, evs, 64, -1);
    for (int i = 0; i < n; ++i) {
      struct conn* c = evs[i].data.ptr;
      if (c == NULL) {
        accept_one(lfd, atoi(argv[2]));
      } else if (!c->closed) {
        pump(c);
      }
    }
    while (ndead > 0) free(dead[--ndead]);
  }
}
