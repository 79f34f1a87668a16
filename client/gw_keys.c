/*
 * gw_keys.c - the API keys the gateway accepts (gw_keys.h).
 */
#include "gw_keys.h"
#include "errcode.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

void gwk_init(gwk_set *k) { memset(k, 0, sizeof *k); }

void gwk_free(gwk_set *k)
{
    for (int i = 0; i < k->n; i++) free(k->keys[i]);
    gwk_init(k);
}

/* Adds the len bytes at key (a piece of a longer text). */
static int add_n(gwk_set *k, const char *key, size_t len, char *err, size_t errcap)
{
    if (len == 0) return 0;
    if (k->n >= GWK_MAX_KEYS) {
        return errf(err, errcap, "more than %d API keys", GWK_MAX_KEYS);
    }
    char *copy = strndup(key, len);
    if (!copy) {
        return errf(err, errcap, "out of memory for an API key");
    }
    k->keys[k->n++] = copy;
    return 0;
}

int gwk_add(gwk_set *k, const char *key, char *err, size_t errcap)
{
    return add_n(k, key, strlen(key), err, errcap);
}

int gwk_add_list(gwk_set *k, const char *list, char *err, size_t errcap)
{
    for (const char *p = list; p && *p;) {
        size_t len = strcspn(p, ",");
        if (add_n(k, p, len, err, errcap) != 0) return -1;
        p += len + (p[len] == ',');
    }
    return 0;
}

/* Opens path for reading if it is a regular file of ours that only we may use: -1 with
 * err otherwise. Checked on the open descriptor, so the file checked is the file read. */
static int open_private(const char *path, struct stat *st, char *err, size_t errcap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        return errf(err, errcap, "%s: %s", path, strerror(errno));
    }
    if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
        errf(err, errcap, "%s: not a regular file", path);
    } else if (st->st_uid != geteuid()) {
        errf(err, errcap, "%s: owned by uid %u, not by the user the gateway runs as (uid %u)", path,
             (unsigned)st->st_uid, (unsigned)geteuid());
    } else if (st->st_mode & (S_IRWXG | S_IRWXO)) {
        errf(err, errcap, "%s: mode %04o is too open (group or others may read or change the keys); chmod 600 %s",
             path, (unsigned)(st->st_mode & 07777), path);
    } else if (st->st_size > GWK_MAX_FILE_SIZE) {
        errf(err, errcap, "%s: %lld bytes, more than %d for a file of API keys", path, (long long)st->st_size,
             GWK_MAX_FILE_SIZE);
    } else {
        return fd;
    }
    close(fd);
    return -1;
}

/* Adds each line of text that is not blank or a # comment, without surrounding blanks. */
static int add_lines(gwk_set *k, const char *text, char *err, size_t errcap)
{
    static const char blank[] = " \t\r";
    for (const char *p = text; *p;) {
        size_t len = strcspn(p, "\n");
        const char *next = p + len + (p[len] == '\n');
        p += strspn(p, blank);
        const char *end = p + strcspn(p, "\n");
        while (end > p && strchr(blank, end[-1])) end--;
        if (*p != '#' && add_n(k, p, (size_t)(end - p), err, errcap) != 0) return -1;
        p = next;
    }
    return 0;
}

int gwk_load_file(gwk_set *k, const char *path, char *err, size_t errcap)
{
    struct stat st;
    int fd = open_private(path, &st, err, errcap);
    if (fd < 0) return -1;
    char text[GWK_MAX_FILE_SIZE + 1];
    ssize_t n = read(fd, text, sizeof text - 1);
    int e = errno;
    close(fd);
    if (n < 0) {
        return errf(err, errcap, "%s: %s", path, strerror(e));
    }
    text[n] = 0;
    char why[160];
    int before = k->n, r = add_lines(k, text, why, sizeof why);
    memset(text, 0, sizeof text); /* no copy of a key left on the stack */
    if (r != 0) errf(err, errcap, "%s: %s", path, why);
    if (r == 0 && k->n == before) {
        return errf(err, errcap, "%s: no API key in it (one key a line; blank lines and lines starting with # are skipped)",
                    path);
    }
    return r;
}

/* Compares without an early exit, so the time taken does not reveal a key's prefix. */
static bool key_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la; i++) d |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
    return d == 0;
}

bool gwk_authorized(const gwk_set *k, const char *authorization)
{
    if (k->n == 0) return true;
    const char *h = authorization;
    if (!h || strncasecmp(h, "Bearer ", 7) != 0) return false;
    h += 7;
    while (*h == ' ') h++;
    bool ok = false;
    for (int i = 0; i < k->n; i++) ok |= key_equal(h, k->keys[i]);
    return ok;
}
