/* Another BPF user on the host, as aet meets them (Cilium, Falco, Tetragon, bpftrace, a
 * metrics exporter): a process that updates and looks up entries of a hash map of its own, in
 * a loop, for as long as it lives. Each such call holds its CPU's "BPF is running" mark for its
 * length; on a kernel that preempts kernel code, the caller can be preempted while holding it,
 * and the kernel then skips every classic tracepoint program on that CPU (docs/kernels.md).
 *
 * bpfhammer [PAUSE_US]: PAUSE_US between rounds (0, the default: none). Prints one line and
 * runs until killed. Static, for the kernel matrix's VMs. */
#include <linux/bpf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static long bpf(int cmd, union bpf_attr *attr) {
    return syscall(SYS_bpf, cmd, attr, sizeof(*attr));
}

int main(int argc, char **argv) {
    unsigned pause_us = argc > 1 ? (unsigned)atoi(argv[1]) : 0;
    union bpf_attr a;
    memset(&a, 0, sizeof(a));
    a.map_type = BPF_MAP_TYPE_HASH;
    a.key_size = 4;
    a.value_size = 64;
    a.max_entries = 1024;
    long fd = bpf(BPF_MAP_CREATE, &a);
    if (fd < 0) {
        perror("bpfhammer: BPF_MAP_CREATE");
        return 1;
    }
    printf("bpfhammer: map calls on fd %ld\n", fd);
    fflush(stdout);
    uint32_t key = 0;
    uint8_t value[64] = {0};
    for (uint64_t n = 0;; n++) {
        key = (uint32_t)(n % 1024);
        value[0] = (uint8_t)n;
        memset(&a, 0, sizeof(a));
        a.map_fd = (uint32_t)fd;
        a.key = (uint64_t)(uintptr_t)&key;
        a.value = (uint64_t)(uintptr_t)value;
        a.flags = BPF_ANY;
        bpf(BPF_MAP_UPDATE_ELEM, &a);
        memset(&a, 0, sizeof(a));
        a.map_fd = (uint32_t)fd;
        a.key = (uint64_t)(uintptr_t)&key;
        a.value = (uint64_t)(uintptr_t)value;
        bpf(BPF_MAP_LOOKUP_ELEM, &a);
        if (pause_us)
            usleep(pause_us);
    }
}
