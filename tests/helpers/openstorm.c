// openstorm N PATH: open and close PATH N times as fast as possible; prints the loop's wall time
// in ns and the number of successful opens. Used by the 200,000-open test and the benchmark.
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: openstorm N PATH\n");
        return 2;
    }
    long n = atol(argv[1]);
    long ok = 0;
    long long t0 = now_ns();
    for (long i = 0; i < n; i++) {
        int fd = open(argv[2], O_RDONLY);
        if (fd >= 0) {
            ok++;
            close(fd);
        }
    }
    long long t1 = now_ns();
    printf("elapsed_ns=%lld opens=%ld\n", t1 - t0, ok);
    return ok == n ? 0 : 1;
}
