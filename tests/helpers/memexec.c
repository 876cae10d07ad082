// memexec BINARY ARG: copies BINARY into a memfd and runs it with execveat(fd, "", AT_EMPTY_PATH):
// a program that never existed on disk.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: memexec BINARY ARG\n");
        return 2;
    }
    int src = open(argv[1], O_RDONLY);
    int mfd = memfd_create("aet-memexec", MFD_CLOEXEC);
    char buf[65536];
    ssize_t n;
    while ((n = read(src, buf, sizeof buf)) > 0) {
        if (write(mfd, buf, n) != n) {
            perror("write");
            return 1;
        }
    }
    char *args[] = {argv[1], argv[2], NULL};
    syscall(SYS_execveat, mfd, "", args, environ, AT_EMPTY_PATH);
    perror("execveat");
    return 1;
}
