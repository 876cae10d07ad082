// int80 PATH: opens PATH through the 32-bit syscall ABI (`int 0x80`, ia32 `open` = 5) from a
// 64-bit process. Syscall tracepoints (`syscalls:sys_enter_open*`) do not see compat syscalls on
// x86_64; aet's raw syscall-exit program must.
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

int main(int argc, char **argv) {
    if (argc != 2 || strlen(argv[1]) >= 4096) {
        fprintf(stderr, "usage: int80 PATH\n");
        return 2;
    }
    // The ia32 ABI passes 32-bit pointers: the path must live below 4 GiB.
    char *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_32BIT,
                   -1, 0);
    if (p == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    strcpy(p, argv[1]);
    long ret;
    __asm__ volatile("int $0x80"
                     : "=a"(ret)
                     : "a"(5L), "b"(p), "c"(0L)
                     : "memory", "r8", "r9", "r10", "r11");
    printf("ret=%ld\n", ret);
    return ret >= 0 ? 0 : 1;
}
