// byhandle PATH: name_to_handle_at(PATH) then open_by_handle_at() of the handle (needs
// CAP_DAC_READ_SEARCH); reads a byte through it. An open that never names a path.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: byhandle PATH\n");
        return 2;
    }
    struct file_handle *fh = malloc(sizeof(*fh) + MAX_HANDLE_SZ);
    fh->handle_bytes = MAX_HANDLE_SZ;
    int mount_id;
    if (name_to_handle_at(AT_FDCWD, argv[1], fh, &mount_id, 0) != 0) {
        perror("name_to_handle_at");
        return 1;
    }
    int mfd = open("/", O_RDONLY | O_DIRECTORY);
    int fd = open_by_handle_at(mfd, fh, O_RDONLY);
    if (fd < 0) {
        perror("open_by_handle_at");
        return 1;
    }
    char c;
    printf("fd=%d read=%zd\n", fd, read(fd, &c, 1));
    return 0;
}
