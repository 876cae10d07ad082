// execat DIR NAME ARG: execveat(open(DIR), NAME, [NAME, ARG]) — an exec relative to a directory
// fd. execat --fd FILE ARG: execveat(open(FILE), "", [FILE, ARG], AT_EMPTY_PATH) — an exec of an
// open file.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: execat DIR NAME ARG | execat --fd FILE ARG\n");
        return 2;
    }
    if (strcmp(argv[1], "--fd") == 0) {
        int fd = open(argv[2], O_PATH | O_CLOEXEC);
        char *args[] = {argv[2], argv[3], NULL};
        syscall(SYS_execveat, fd, "", args, environ, AT_EMPTY_PATH);
    } else {
        int dfd = open(argv[1], O_DIRECTORY | O_RDONLY);
        char *args[] = {argv[2], argv[3], NULL};
        syscall(SYS_execveat, dfd, argv[2], args, environ, 0);
    }
    perror("execveat");
    return 1;
}
