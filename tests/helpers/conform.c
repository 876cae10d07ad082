/* The kernel matrix's workload (`cargo xtask kernels`): once each, the ways of reaching a file
 * that the record must hold on every kernel aet supports. Built static, so that it runs in a
 * VM's initramfs as it runs on the host.
 *
 *   conform DIR      in DIR (made first): an open by dirfd, an open through a symlink, an open
 *                    through "..", a failed open (ENOENT), a rename, an exec with a marked argv,
 *                    a process that daemonises and then writes a file, an fd passed over a unix
 *                    socket and received with recvmmsg, a refused connect to 127.0.0.1:9
 *   conform argv M   (the exec'd side) exits 0
 *
 * Each step prints "conform: STEP" as it is done; the last line is "conform: done".
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void die(const char *what) {
    fprintf(stderr, "conform: %s: %s\n", what, strerror(errno));
    exit(2);
}

static void write_file(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, text, strlen(text)) < 0 || close(fd) < 0)
        die(path);
}

static void step(const char *name) {
    printf("conform: %s\n", name);
    fflush(stdout);
}

static void nap_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "argv"))
        return 0;
    if (argc != 2) {
        fprintf(stderr, "usage: conform DIR\n");
        return 2;
    }
    const char *root = argv[1];
    char p[4096], q[4096];
    if (mkdir(root, 0755) < 0 && errno != EEXIST)
        die(root);
    if (chdir(root) < 0)
        die(root);
    if (mkdir("dir", 0755) < 0 && errno != EEXIST)
        die("dir");
    write_file("dir/a.txt", "a\n");
    write_file("dir/b.txt", "b\n");
    write_file("dir/target.txt", "target\n");
    write_file("passed.txt", "passed\n");
    unlink("link");
    if (symlink("dir/target.txt", "link") < 0)
        die("symlink");

    /* An open by dirfd. */
    int dfd = open("dir", O_RDONLY | O_DIRECTORY);
    if (dfd < 0)
        die("open dir");
    int fd = openat(dfd, "a.txt", O_RDONLY);
    if (fd < 0)
        die("openat a.txt");
    close(fd);
    close(dfd);
    step("dirfd");

    /* Through a symlink, and through "..". */
    snprintf(p, sizeof p, "%s/link", root);
    if ((fd = open(p, O_RDONLY)) < 0)
        die(p);
    close(fd);
    step("symlink");
    if (chdir("dir") < 0)
        die("chdir dir");
    if ((fd = open("../dir/b.txt", O_RDONLY)) < 0)
        die("../dir/b.txt");
    close(fd);
    if (chdir(root) < 0)
        die(root);
    step("dotdot");

    /* A failed open. */
    snprintf(p, sizeof p, "%s/missing.txt", root);
    if (open(p, O_RDONLY) >= 0 || errno != ENOENT)
        die("open missing.txt did not fail with ENOENT");
    step("enoent");

    /* A rename. */
    snprintf(p, sizeof p, "%s/dir/b.txt", root);
    snprintf(q, sizeof q, "%s/dir/c.txt", root);
    if (rename(p, q) < 0)
        die("rename");
    step("rename");

    /* An exec with argv. */
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        char *args[] = {argv[0], "argv", "conform-argv-marker", NULL};
        execv("/proc/self/exe", args);
        die("execv");
    }
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        die("the exec'd child");
    step("exec");

    /* A process that daemonises (its parent exits first), then writes a file. */
    snprintf(p, sizeof p, "%s/daemon.txt", root);
    snprintf(q, sizeof q, "%s/daemon.done", root);
    pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        setsid();
        if (fork() != 0)
            _exit(0);
        nap_ms(200);
        write_file(p, "written by a daemon\n");
        write_file(q, "");
        _exit(0);
    }
    waitpid(pid, &st, 0);
    for (int i = 0; access(q, F_OK) < 0; i++) {
        if (i > 100)
            die("the daemon did not write its file");
        nap_ms(50);
    }
    step("daemon");

    /* An fd passed over a unix socket, received with recvmmsg. */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) < 0)
        die("socketpair");
    snprintf(p, sizeof p, "%s/passed.txt", root);
    int passed = open(p, O_RDONLY);
    if (passed < 0)
        die(p);
    {
        char byte = 'x';
        struct iovec iov = {&byte, 1};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        struct msghdr m = {0};
        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        m.msg_control = u.buf;
        m.msg_controllen = sizeof u.buf;
        struct cmsghdr *c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &passed, sizeof(int));
        if (sendmsg(sv[0], &m, 0) < 0)
            die("sendmsg");
    }
    close(passed);
    {
        char byte;
        struct iovec iov = {&byte, 1};
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } u;
        struct mmsghdr mm = {0};
        mm.msg_hdr.msg_iov = &iov;
        mm.msg_hdr.msg_iovlen = 1;
        mm.msg_hdr.msg_control = u.buf;
        mm.msg_hdr.msg_controllen = sizeof u.buf;
        if (recvmmsg(sv[1], &mm, 1, 0, NULL) != 1)
            die("recvmmsg");
        struct cmsghdr *c = CMSG_FIRSTHDR(&mm.msg_hdr);
        if (!c || c->cmsg_type != SCM_RIGHTS)
            die("no fd received");
        int got;
        memcpy(&got, CMSG_DATA(c), sizeof(int));
        char buf[64];
        if (read(got, buf, sizeof buf) <= 0)
            die("read the received fd");
        close(got);
    }
    step("recvmmsg");

    /* A connect (refused: nothing listens on port 9). */
    int s = socket(AF_INET, SOCK_STREAM, 0);
    if (s < 0)
        die("socket");
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons(9);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connect(s, (struct sockaddr *)&a, sizeof a);
    close(s);
    step("connect");
    step("done");
    return 0;
}
