// uring_open PATH: opens PATH with an io_uring IORING_OP_OPENAT request (raw syscalls, no
// liburing): an open that never passes the open syscalls.
#include <fcntl.h>
#include <linux/io_uring.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: uring_open PATH\n");
        return 2;
    }
    struct io_uring_params p;
    memset(&p, 0, sizeof p);
    int ring = syscall(__NR_io_uring_setup, 4, &p);
    if (ring < 0) {
        perror("io_uring_setup");
        return 1;
    }
    size_t sq_sz = p.sq_off.array + p.sq_entries * sizeof(unsigned);
    size_t cq_sz = p.cq_off.cqes + p.cq_entries * sizeof(struct io_uring_cqe);
    char *sq = mmap(0, sq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                    IORING_OFF_SQ_RING);
    char *cq = mmap(0, cq_sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, ring,
                    IORING_OFF_CQ_RING);
    struct io_uring_sqe *sqes =
        mmap(0, p.sq_entries * sizeof(struct io_uring_sqe), PROT_READ | PROT_WRITE,
             MAP_SHARED | MAP_POPULATE, ring, IORING_OFF_SQES);
    if (sq == MAP_FAILED || cq == MAP_FAILED || sqes == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    unsigned *tail = (unsigned *)(sq + p.sq_off.tail);
    unsigned *mask = (unsigned *)(sq + p.sq_off.ring_mask);
    unsigned *array = (unsigned *)(sq + p.sq_off.array);
    unsigned idx = *tail & *mask;
    struct io_uring_sqe *sqe = &sqes[idx];
    memset(sqe, 0, sizeof *sqe);
    sqe->opcode = IORING_OP_OPENAT;
    sqe->fd = AT_FDCWD;
    sqe->addr = (unsigned long)argv[1];
    sqe->open_flags = O_RDONLY;
    array[idx] = idx;
    __atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
    if (syscall(__NR_io_uring_enter, ring, 1, 1, IORING_ENTER_GETEVENTS, NULL, 0) < 0) {
        perror("io_uring_enter");
        return 1;
    }
    unsigned *chead = (unsigned *)(cq + p.cq_off.head);
    unsigned *cmask = (unsigned *)(cq + p.cq_off.ring_mask);
    struct io_uring_cqe *cqes = (struct io_uring_cqe *)(cq + p.cq_off.cqes);
    int res = cqes[*chead & *cmask].res;
    printf("res=%d\n", res);
    return res >= 0 ? 0 : 1;
}
