// The AArch32 workload of the arm64 VMs (`cargo xtask kernels`): a 32-bit program whose
// syscalls reach the kernel through the compat ABI (arm's EABI numbers). Built static with
// arm-linux-gnueabihf-gcc. Argument: a directory to work in.
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc < 2) return 2;
    char path[4096];
    snprintf(path, sizeof path, "%s/compat.txt", argv[1]);
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
    if (fd < 0 || write(fd, "compat\n", 7) != 7) return 3;
    close(fd);
    int dir = open(argv[1], O_RDONLY | O_DIRECTORY);
    if (dir < 0) return 4;
    int f = openat(dir, "compat.txt", O_RDONLY);
    if (f < 0) return 5;
    close(f);
    struct stat st;
    if (stat(path, &st) != 0) return 6;
    char *args[] = {"/bin/true", "compat-argv-marker", NULL};
    execv(args[0], args);
    return 7;
}
