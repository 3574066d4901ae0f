/*  Test fixture: raw HTTP/1.1 over TCP, byte for byte as a test writes it
 *  (what libcurl would fix up or refuse to send): connect from a chosen
 *  local address, send, read until the server closes. Header-only, like
 *  serve_fixture.h. */
#ifndef KORCH_RAWHTTP_H
#define KORCH_RAWHTTP_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* CLOCK_MONOTONIC in milliseconds. */
static inline int64_t raw_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

static inline int raw_connect(int port, const char *src)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    if (src) {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        inet_pton(AF_INET, src, &sa.sin_addr);
        if (bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
            close(fd);
            return -1;
        }
    }
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static inline bool raw_send_all(int fd, const void *data, size_t len)
{
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, (const char *)data + off, len - off, MSG_NOSIGNAL);
        if (n <= 0)
            return false;
        off += (size_t)n;
    }
    return true;
}

/* Read until the server closes or timeout_ms: the bytes (new), in *len. */
static inline char *raw_read_all(int fd, int timeout_ms, size_t *len)
{
    size_t cap = 1 << 16, got = 0;
    char *buf = malloc(cap);
    int64_t end = raw_ms() + timeout_ms;
    for (;;) {
        int left = (int)(end - raw_ms());
        struct pollfd p = {fd, POLLIN, 0};
        if (left <= 0 || poll(&p, 1, left) <= 0)
            break;
        if (got + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
        }
        ssize_t n = recv(fd, buf + got, cap - got - 1, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    buf[got] = 0;
    if (len)
        *len = got;
    return buf;
}

/* One request on a new connection; the response (new) and its time in *ms. */
static inline char *raw_request(int port, const char *req, size_t req_len, int timeout_ms, double *ms, size_t *len)
{
    int64_t t0 = raw_ms();
    int fd = raw_connect(port, NULL);
    if (fd < 0)
        return NULL;
    char *r = raw_send_all(fd, req, req_len ? req_len : strlen(req)) ? raw_read_all(fd, timeout_ms, len) : NULL;
    close(fd);
    if (ms)
        *ms = (double)(raw_ms() - t0);
    return r;
}

static inline int raw_status(const char *resp)
{
    int st = 0, minor;
    return resp && sscanf(resp, "HTTP/1.%d %d", &minor, &st) == 2 ? st : 0;
}

static inline const char *raw_body(const char *resp)
{
    const char *b = resp ? strstr(resp, "\r\n\r\n") : NULL;
    return b ? b + 4 : "";
}

#endif
