/* Network calls for the tests, each reported on stdout as "ok" or the errno's text:
 *
 *   netprobe tcp ADDRESS PORT    connect(2) to an IPv4 address
 *   netprobe unix PATH           connect(2) to a unix socket (@NAME: an abstract one)
 *   netprobe udp6 PORT           sendto(2) one datagram to [::1]:PORT
 */
#include <arpa/inet.h>
#include <errno.h>
#include <stddef.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

static int report(int r) {
    if (r < 0) {
        printf("%s\n", strerror(errno));
        return 1;
    }
    printf("ok\n");
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 4 && !strcmp(argv[1], "tcp")) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in a = {0};
        a.sin_family = AF_INET;
        a.sin_port = htons(atoi(argv[3]));
        inet_pton(AF_INET, argv[2], &a.sin_addr);
        return report(connect(s, (void *)&a, sizeof a));
    }
    if (argc == 3 && !strcmp(argv[1], "unix")) {
        int s = socket(AF_UNIX, SOCK_STREAM, 0);
        struct sockaddr_un a = {0};
        a.sun_family = AF_UNIX;
        if (argv[2][0] == '@') {
            size_t n = strlen(argv[2] + 1);
            if (n > sizeof a.sun_path - 1)
                n = sizeof a.sun_path - 1;
            memcpy(a.sun_path + 1, argv[2] + 1, n);
            return report(connect(s, (void *)&a, offsetof(struct sockaddr_un, sun_path) + 1 + n));
        }
        strncpy(a.sun_path, argv[2], sizeof a.sun_path - 1);
        return report(connect(s, (void *)&a, sizeof a));
    }
    if (argc == 3 && !strcmp(argv[1], "udp6")) {
        int s = socket(AF_INET6, SOCK_DGRAM, 0);
        struct sockaddr_in6 a = {0};
        a.sin6_family = AF_INET6;
        a.sin6_port = htons(atoi(argv[2]));
        a.sin6_addr = in6addr_loopback;
        return report(sendto(s, "x", 1, 0, (void *)&a, sizeof a) == 1 ? 0 : -1);
    }
    fprintf(stderr, "netprobe: bad arguments\n");
    return 2;
}
