// sockstorm tcp CONNS WRITES: CONNS TCP connections to a listener of its own on 127.0.0.1, each
// sending WRITES writes of 512 bytes, the first an HTTP request head naming a host.
// sockstorm dns QUERIES: QUERIES DNS queries (A bench.test) sent with sendto to 127.0.0.1:53,
// where nothing answers. What the names-on-the-network benchmark measures the capture on.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int listener;

static void *drain(void *arg) {
    (void)arg;
    char buf[65536];
    for (;;) {
        int c = accept(listener, NULL, NULL);
        if (c < 0) return NULL;
        while (read(c, buf, sizeof buf) > 0) {
        }
        close(c);
    }
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: sockstorm tcp CONNS WRITES | sockstorm dns QUERIES\n");
        return 2;
    }
    struct sockaddr_in a = {.sin_family = AF_INET};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (strcmp(argv[1], "dns") == 0) {
        long n = atol(argv[2]);
        // A query for bench.test, type A, class IN.
        unsigned char q[] = {0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 5, 'b', 'e', 'n', 'c',
                             'h', 4, 't', 'e', 's', 't', 0, 0, 1, 0, 1};
        int s = socket(AF_INET, SOCK_DGRAM, 0);
        a.sin_port = htons(53);
        for (long i = 0; i < n; i++) {
            q[0] = (unsigned char)(i >> 8);
            q[1] = (unsigned char)i;
            if (sendto(s, q, sizeof q, 0, (struct sockaddr *)&a, sizeof a) < 0) {
                perror("sendto");
                return 1;
            }
        }
        return 0;
    }
    if (argc < 4) return 2;
    long conns = atol(argv[2]), writes = atol(argv[3]);
    listener = socket(AF_INET, SOCK_STREAM, 0);
    socklen_t len = sizeof a;
    if (bind(listener, (struct sockaddr *)&a, sizeof a) || listen(listener, 512) ||
        getsockname(listener, (struct sockaddr *)&a, &len)) {
        perror("listen");
        return 1;
    }
    pthread_t t;
    pthread_create(&t, NULL, drain, NULL);
    char msg[512];
    memset(msg, 'x', sizeof msg);
    const char *head = "GET / HTTP/1.1\r\nHost: bench.test\r\n\r\n";
    memcpy(msg, head, strlen(head));
    for (long i = 0; i < conns; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&a, sizeof a)) {
            perror("connect");
            return 1;
        }
        for (long j = 0; j < writes; j++) {
            if (write(s, msg, sizeof msg) != sizeof msg) {
                perror("write");
                return 1;
            }
        }
        close(s);
    }
    return 0;
}
