// openflags FLAGS PATH...: opens each PATH with open(2) flags FLAGS (octal, as in <fcntl.h>) and
// mode 0644, then closes it. Prints one line a path: "ok" or the errno's text. Exit 1 if any
// open failed.
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: openflags FLAGS PATH...\n");
        return 2;
    }
    int flags = (int)strtol(argv[1], NULL, 8);
    int failed = 0;
    for (int i = 2; i < argc; i++) {
        int fd = open(argv[i], flags, 0644);
        if (fd < 0) {
            printf("%s: %s\n", argv[i], strerror(errno));
            failed = 1;
        } else {
            printf("%s: ok\n", argv[i]);
            close(fd);
        }
    }
    return failed;
}
