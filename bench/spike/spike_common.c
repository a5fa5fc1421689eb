#include "spike_common.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char k_json[] = "{\"model_name\":\"mlp\",\"model_version\":\"1\",\"outputs\":[{\"name\":\"y\","
                             "\"datatype\":\"FP32\",\"shape\":[1,512],\"parameters\":{\"binary_data_size\":2048}}]}";
static char g_body[sizeof k_json - 1 + SPIKE_OUT_BYTES];
static spike_reply g_reply;

const spike_reply *spike_reply_get(void)
{
    if (!g_reply.body) {
        memcpy(g_body, k_json, sizeof k_json - 1);
        for (size_t i = 0; i < SPIKE_OUT_BYTES; i++) g_body[sizeof k_json - 1 + i] = (char)(i * 7);
        g_reply.body = g_body;
        g_reply.body_len = sizeof g_body;
        g_reply.json_len = sizeof k_json - 1;
        snprintf(g_reply.json_len_str, sizeof g_reply.json_len_str, "%zu", g_reply.json_len);
    }
    return &g_reply;
}

int spike_listen(const char *port_arg, int nonblocking)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    if (fd < 0) return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(port_arg))};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof a;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0 || listen(fd, 1024) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &al) != 0 ||
        (nonblocking && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) != 0)) {
        perror("listen");
        close(fd);
        return -1;
    }
    printf("listening on 127.0.0.1:%d\n", ntohs(a.sin_port));
    fflush(stdout);
    return fd;
}

int spike_check_body(const char *hdr, size_t hdr_len, size_t len)
{
    char tmp[24];
    if (!hdr || hdr_len == 0 || hdr_len >= sizeof tmp) return -1;
    memcpy(tmp, hdr, hdr_len);
    tmp[hdr_len] = 0;
    char *end;
    unsigned long v = strtoul(tmp, &end, 10);
    return *end == 0 && v <= len ? 0 : -1;
}
