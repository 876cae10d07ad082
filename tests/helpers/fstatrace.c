// fstatrace REAL DECOY N: stats REAL as newfstatat(fd of DECOY, buf, AT_EMPTY_PATH) N times while
// another thread keeps blanking and restoring the first byte of buf (REAL, an absolute path).
// A call that read "" stats DECOY (glibc's fstat is this call); one that read REAL stats REAL,
// though a tracer reading buf after the call may find "" there. Prints how many calls stat'ed each.
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static char buf[4096];
static volatile int stop;

static void *flipper(void *arg) {
    (void)arg;
    while (!stop) {
        ((volatile char *)buf)[0] = 0;
        for (volatile int i = 0; i < 200; i++)
            ;
        ((volatile char *)buf)[0] = '/';
        for (volatile int i = 0; i < 200; i++)
            ;
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 || argv[1][0] != '/') {
        fprintf(stderr, "usage: fstatrace /REAL DECOY N\n");
        return 2;
    }
    strcpy(buf, argv[1]);
    int fd = open(argv[2], O_RDONLY);
    if (fd < 0) {
        perror(argv[2]);
        return 2;
    }
    struct stat real, decoy;
    if (stat(argv[1], &real) || fstat(fd, &decoy)) {
        perror("stat");
        return 2;
    }
    pthread_t t;
    pthread_create(&t, NULL, flipper, NULL);
    long n = atol(argv[3]), hits[2] = {0, 0};
    for (long i = 0; i < n; i++) {
        struct stat st;
        if (syscall(SYS_newfstatat, fd, buf, &st, AT_EMPTY_PATH) != 0)
            continue;
        hits[st.st_ino == real.st_ino ? 0 : 1]++;
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("real=%ld decoy=%ld\n", hits[0], hits[1]);
    return 0;
}
