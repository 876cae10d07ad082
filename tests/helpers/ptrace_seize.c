/* Tries to attach to a process with PTRACE_SEIZE (which does not stop it) and prints the
 * result: "ok" (then detaches) or the errno name. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/types.h>

int main(int argc, char **argv) {
    if (argc != 2) return 2;
    pid_t pid = (pid_t)atoi(argv[1]);
    if (ptrace(PTRACE_SEIZE, pid, 0, 0) == 0) {
        ptrace(PTRACE_DETACH, pid, 0, 0);
        puts("ok");
        return 0;
    }
    puts(errno == EPERM ? "EPERM" : strerror(errno));
    return 1;
}
