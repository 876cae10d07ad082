// toctou REAL DECOY N: one thread keeps rewriting a path buffer between REAL and DECOY while the
// main thread opens the buffer N times. The string a tracer reads after the kernel's copy may
// name the other file; the kernel's record of the opened file may not. Prints how many opens
// landed on each file (by inode).
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char buf[4096];
static const char *paths[2];
static volatile int stop;

static void *flipper(void *arg) {
    (void)arg;
    int i = 0;
    while (!stop) {
        strcpy(buf, paths[i++ & 1]);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 4 || strlen(argv[1]) != strlen(argv[2])) {
        fprintf(stderr, "usage: toctou REAL DECOY N (paths of equal length)\n");
        return 2;
    }
    paths[0] = argv[1];
    paths[1] = argv[2];
    strcpy(buf, paths[0]);
    struct stat real;
    stat(argv[1], &real);
    pthread_t t;
    pthread_create(&t, NULL, flipper, NULL);
    long n = atol(argv[3]), hits[2] = {0, 0};
    for (long i = 0; i < n; i++) {
        int fd = open(buf, O_RDONLY);
        if (fd < 0)
            continue;
        struct stat st;
        fstat(fd, &st);
        hits[st.st_ino == real.st_ino ? 0 : 1]++;
        close(fd);
    }
    stop = 1;
    pthread_join(t, NULL);
    printf("real=%ld decoy=%ld\n", hits[0], hits[1]);
    return 0;
}
