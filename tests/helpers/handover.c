/* Routes by which a file's content reaches a process without it opening the file: the tests'
 * helper, run inside a monitored run (the receiving side) or outside it (the holding side).
 *
 *   handover hold FILE            open FILE, read it into memory, print "PID FD ADDR LEN", wait
 *   handover serve SOCK FILE...   open each FILE, send their fds in one message to the first client
 *                                 of unix socket SOCK
 *   handover recv SOCK            connect to SOCK, receive fds (recvmsg, SCM_RIGHTS), copy each to
 *                                 stdout
 *   handover recvmm SOCK          the same with recvmmsg
 *   handover getfd PID FD         pidfd_open + pidfd_getfd of PID's FD, copy it to stdout
 *   handover vmread PID ADDR LEN  process_vm_readv of PID's memory to stdout
 *   handover vmwrite PID ADDR     process_vm_writev of one byte into PID's memory
 *   handover peek PID ADDR        ptrace attach, one PEEKDATA word to stdout, detach
 *   handover splice FILE          splice FILE into a pipe, copy the pipe to stdout
 *   handover fanotify DIR         watch DIR for opens, print "ready", copy the first opened
 *                                 file (through the event's fd) to stdout
 *   handover stdin                copy fd 0 to stdout with read(2)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fanotify.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static void die(const char *what) {
    perror(what);
    exit(2);
}

static void copy_out(int fd) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0)
        if (write(1, buf, n) != n)
            die("write");
    if (n < 0)
        die("read");
}

static int unix_addr(const char *path, struct sockaddr_un *a) {
    memset(a, 0, sizeof *a);
    a->sun_family = AF_UNIX;
    strncpy(a->sun_path, path, sizeof a->sun_path - 1);
    return socket(AF_UNIX, SOCK_STREAM, 0);
}

int main(int argc, char **argv) {
    if (argc < 2)
        return 2;
    const char *mode = argv[1];
    if (!strcmp(mode, "hold") && argc == 3) {
        int fd = open(argv[2], O_RDONLY);
        if (fd < 0)
            die("open");
        static char data[4096];
        ssize_t n = read(fd, data, sizeof data);
        if (n < 0)
            die("read");
        printf("%d %d %lu %zd\n", getpid(), fd, (unsigned long)data, n);
        fflush(stdout);
        for (;;)
            pause();
    }
    if (!strcmp(mode, "serve") && argc >= 4) {
        int files[16];
        int n = argc - 3;
        if (n > 16)
            return 2;
        for (int i = 0; i < n; i++)
            if ((files[i] = open(argv[3 + i], O_RDONLY)) < 0)
                die("open");
        struct sockaddr_un a;
        int s = unix_addr(argv[2], &a);
        unlink(argv[2]);
        if (s < 0 || bind(s, (void *)&a, sizeof a) || listen(s, 1))
            die("listen");
        printf("ready\n");
        fflush(stdout);
        int c = accept(s, NULL, NULL);
        if (c < 0)
            die("accept");
        char byte = 'x';
        struct iovec iov = {&byte, 1};
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int) * 16)];
        } ctl;
        memset(&ctl, 0, sizeof ctl);
        struct msghdr m = {0};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = ctl.buf;
        m.msg_controllen = CMSG_SPACE(sizeof(int) * n);
        struct cmsghdr *h = CMSG_FIRSTHDR(&m);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int) * n);
        memcpy(CMSG_DATA(h), files, sizeof(int) * n);
        if (sendmsg(c, &m, 0) != 1)
            die("sendmsg");
        /* Until the client is done. */
        while (read(c, &byte, 1) > 0)
            ;
        return 0;
    }
    if ((!strcmp(mode, "recv") || !strcmp(mode, "recvmm")) && argc == 3) {
        struct sockaddr_un a;
        int s = unix_addr(argv[2], &a);
        if (s < 0 || connect(s, (void *)&a, sizeof a))
            die("connect");
        char byte;
        struct iovec iov = {&byte, 1};
        union {
            struct cmsghdr h;
            char buf[CMSG_SPACE(sizeof(int) * 16)];
        } ctl;
        struct mmsghdr mm;
        memset(&mm, 0, sizeof mm);
        struct msghdr *m = &mm.msg_hdr;
        m->msg_iov = &iov;
        m->msg_iovlen = 1;
        m->msg_control = ctl.buf;
        m->msg_controllen = sizeof ctl.buf;
        if (!strcmp(mode, "recv")) {
            if (recvmsg(s, m, 0) != 1)
                die("recvmsg");
        } else if (recvmmsg(s, &mm, 1, 0, NULL) != 1) {
            die("recvmmsg");
        }
        struct cmsghdr *h = CMSG_FIRSTHDR(m);
        if (!h || h->cmsg_type != SCM_RIGHTS)
            die("no fd");
        int n = (h->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (int i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(h) + i * sizeof(int), sizeof fd);
            copy_out(fd);
            close(fd);
        }
        return 0;
    }
    if (!strcmp(mode, "getfd") && argc == 4) {
        int pidfd = syscall(SYS_pidfd_open, atoi(argv[2]), 0);
        if (pidfd < 0)
            die("pidfd_open");
        int fd = syscall(SYS_pidfd_getfd, pidfd, atoi(argv[3]), 0);
        if (fd < 0)
            die("pidfd_getfd");
        lseek(fd, 0, SEEK_SET);
        copy_out(fd);
        close(fd);
        return 0;
    }
    if (!strcmp(mode, "vmread") && argc == 5) {
        size_t len = strtoul(argv[4], NULL, 10);
        char *buf = malloc(len);
        struct iovec local = {buf, len};
        struct iovec remote = {(void *)strtoul(argv[3], NULL, 10), len};
        ssize_t n = process_vm_readv(atoi(argv[2]), &local, 1, &remote, 1, 0);
        if (n < 0)
            die("process_vm_readv");
        if (write(1, buf, n) != n)
            die("write");
        return 0;
    }
    if (!strcmp(mode, "vmwrite") && argc == 4) {
        char byte = 'a';
        struct iovec local = {&byte, 1};
        struct iovec remote = {(void *)strtoul(argv[3], NULL, 10), 1};
        if (process_vm_writev(atoi(argv[2]), &local, 1, &remote, 1, 0) != 1)
            die("process_vm_writev");
        return 0;
    }
    if (!strcmp(mode, "peek") && argc == 4) {
        pid_t pid = atoi(argv[2]);
        if (ptrace(PTRACE_ATTACH, pid, 0, 0))
            die("attach");
        waitpid(pid, NULL, __WALL);
        errno = 0;
        long word = ptrace(PTRACE_PEEKDATA, pid, (void *)strtoul(argv[3], NULL, 10), 0);
        if (errno)
            die("peek");
        if (write(1, &word, sizeof word) != sizeof word)
            die("write");
        ptrace(PTRACE_DETACH, pid, 0, 0);
        return 0;
    }
    if (!strcmp(mode, "splice") && argc == 3) {
        int fd = open(argv[2], O_RDONLY);
        int p[2];
        if (fd < 0 || pipe(p))
            die("open");
        ssize_t n = splice(fd, NULL, p[1], NULL, 65536, 0);
        if (n < 0)
            die("splice");
        close(p[1]);
        close(fd);
        copy_out(p[0]);
        return 0;
    }
    if (!strcmp(mode, "fanotify") && argc == 3) {
        int g = fanotify_init(FAN_CLASS_NOTIF, O_RDONLY);
        if (g < 0)
            die("fanotify_init");
        if (fanotify_mark(g, FAN_MARK_ADD, FAN_OPEN | FAN_EVENT_ON_CHILD, AT_FDCWD, argv[2]))
            die("fanotify_mark");
        fprintf(stderr, "ready\n");
        char buf[4096];
        for (;;) {
            ssize_t n = read(g, buf, sizeof buf);
            if (n <= 0)
                die("read events");
            struct fanotify_event_metadata *e = (void *)buf;
            for (; FAN_EVENT_OK(e, n); e = FAN_EVENT_NEXT(e, n)) {
                if (e->fd < 0)
                    continue;
                /* Only an outside process's open: not this process's own reads. */
                if (e->pid != getpid()) {
                    copy_out(e->fd);
                    close(e->fd);
                    return 0;
                }
                close(e->fd);
            }
        }
    }
    if (!strcmp(mode, "stdin") && argc == 2) {
        copy_out(0);
        return 0;
    }
    fprintf(stderr, "handover: bad arguments\n");
    return 2;
}
