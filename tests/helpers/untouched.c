// untouched FILE: opens paths whose bytes live in pages the process has not touched:
//  1. a page of FILE mapped privately and never read (its content is a path, NUL-terminated);
//  2. a string literal in this freshly exec'd binary's read-only data.
// A path read at syscall entry without faulting reads nothing here; aet reads at exit.
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

static const char literal[] = "/proc/self/stat_untouched_literal_path_for_aet";

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: untouched FILE\n");
        return 2;
    }
    int fd = open(argv[1], O_RDONLY);
    if (fd < 0) {
        perror("open");
        return 1;
    }
    const char *p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    // The mapped path names FILE itself, so this open succeeds.
    int r = open(p, O_RDONLY);
    int r2 = open(literal, O_RDONLY);
    printf("mapped=%d literal=%d\n", r >= 0, r2 >= 0);
    return r >= 0 ? 0 : 1;
}
