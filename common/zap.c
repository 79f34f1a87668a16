/* zap.c - a ZAP handler with per-domain allow-lists of CURVE client keys (see zap.h). */
#include "zap.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "log.h"
#include "net.h"
#include "errcode.h"

#define ZAP_ENDPOINT   "inproc://zeromq.zap.01"
#define ZAP_MAX_DOMAINS 4
#define ZAP_MAX_KEYS    1024

typedef struct {
    char     name[16];
    int      any;          /* "*": every key */
    int      n;
    uint8_t (*keys)[32];   /* (n) */
    const char *env;       /* where the list came from, for log lines */
} zap_domain;

struct zap {
    void      *rep;        /* REP at ZAP_ENDPOINT, used by the thread only */
    pthread_t  thread;
    int        stop;       /* atomic */
    zap_domain dom[ZAP_MAX_DOMAINS];
    int        n_dom;      /* set before the first socket of a domain binds (main thread) */
    uint64_t   refused, accepted; /* atomic */
    int64_t    last_log_ms;
    uint64_t   quiet;      /* refusals not logged since the last line */
};

/* Adds the keys of one text to keys[*n]: words separated by commas or whitespace (z85
 * uses neither); a word starting with '#' that is not 40 characters long (a key may
 * begin with '#') starts a comment to the end of the line. -1 with err on a bad key. */
static int parse_text(const char *t, uint8_t (*keys)[32], int cap, int *n, char *err, size_t errcap)
{
    while (*t) {
        if (isspace((unsigned char)*t) || *t == ',') {
            t++;
            continue;
        }
        size_t len = 0;
        while (t[len] && !isspace((unsigned char)t[len]) && t[len] != ',') len++;
        if (*t == '#' && len != 40) {
            while (*t && *t != '\n') t++;
            continue;
        }
        char k[41];
        if (len != 40) {
            return errf(err, errcap, "'%.*s' is not a 40-character z85 CURVE public key", (int)(len > 48 ? 48 : len), t);
        }
        memcpy(k, t, 40);
        k[40] = 0;
        if (*n >= cap) {
            return errf(err, errcap, "more than %d keys", cap);
        }
        if (!zmq_z85_decode(keys[*n], k)) {
            return errf(err, errcap, "'%s' is not valid z85", k);
        }
        (*n)++;
        t += len;
    }
    return 0;
}

int zap_parse_list(const char *list, uint8_t (*keys)[32], int cap, char *err, size_t errcap)
{
    while (isspace((unsigned char)*list)) list++;
    size_t len = strlen(list);
    while (len && isspace((unsigned char)list[len - 1])) len--;
    if (len == 1 && *list == '*') return -2;
    int n = 0;
    if (len != 40 && len && !memchr(list, ',', len) && !memchr(list, ' ', len)) { /* one word: a file */
        char path[1024];
        snprintf(path, sizeof path, "%.*s", (int)len, list);
        FILE *f = fopen(path, "r");
        if (!f) {
            return errf(err, errcap, "cannot read the key file %s: %s", path, strerror(errno));
        }
        char line[512];
        while (fgets(line, sizeof line, f)) {
            if (parse_text(line, keys, cap, &n, err, errcap) != 0) {
                fclose(f);
                return -1;
            }
        }
        fclose(f);
    } else if (parse_text(list, keys, cap, &n, err, errcap) != 0) {
        return -1;
    }
    if (!n) {
        return errf(err, errcap, "no key in the list (use '*' to accept any key)");
    }
    return n;
}

static const zap_domain *find_domain(const zap *z, const char *name, size_t len)
{
    int nd = __atomic_load_n(&z->n_dom, __ATOMIC_ACQUIRE);
    for (int i = 0; i < nd; i++)
        if (strlen(z->dom[i].name) == len && !memcmp(z->dom[i].name, name, len)) return &z->dom[i];
    return NULL;
}

/* 1 if the 32-byte key is allowed in the domain. */
static int allowed(const zap_domain *d, const uint8_t *key)
{
    if (!d) return 0;
    if (d->any) return 1;
    for (int i = 0; i < d->n; i++)
        if (!memcmp(d->keys[i], key, 32)) return 1;
    return 0;
}

static void send_frame(void *s, const void *p, size_t n, int more)
{
    zmq_send(s, p, n, more ? ZMQ_SNDMORE : 0);
}

/* Answers one ZAP request (RFC 27: version, request id, domain, address, identity,
 * mechanism, credentials...). */
static void handle(zap *z)
{
    zmq_msg_t fr[8];
    int n = 0, more = 1;
    while (more) {
        zmq_msg_t x;
        zmq_msg_init(&x);
        if (zmq_msg_recv(&x, z->rep, 0) < 0) {
            zmq_msg_close(&x);
            break;
        }
        more = zmq_msg_more(&x);
        if (n < 8) fr[n++] = x;
        else zmq_msg_close(&x);
    }
    if (n < 6) { /* not a ZAP request: REP must still answer something */
        for (int i = 0; i < n; i++) zmq_msg_close(&fr[i]);
        send_frame(z->rep, "1.0", 3, 0);
        return;
    }
    const char *dom = zmq_msg_data(&fr[2]), *addr = zmq_msg_data(&fr[3]), *mech = zmq_msg_data(&fr[5]);
    size_t dl = zmq_msg_size(&fr[2]), al = zmq_msg_size(&fr[3]), ml = zmq_msg_size(&fr[5]);
    const zap_domain *d = find_domain(z, dom, dl);
    int ok = 0;
    char user[48] = "", z85[41] = "?";
    if (ml == 5 && !memcmp(mech, "CURVE", 5) && n >= 7 && zmq_msg_size(&fr[6]) == 32) {
        const uint8_t *key = zmq_msg_data(&fr[6]);
        zmq_z85_encode(z85, key, 32);
        ok = allowed(d, key);
        snprintf(user, sizeof user, "key %s", z85);
    }
    if (ok) {
        __atomic_add_fetch(&z->accepted, 1, __ATOMIC_RELAXED);
    } else {
        __atomic_add_fetch(&z->refused, 1, __ATOMIC_RELAXED);
        int64_t now = net_now_ms();
        if (now - z->last_log_ms >= 1000) {
            log_warn("refused a %.*s connection from %.*s with key %s on '%.*s': %s%s", (int)ml, mech, (int)al, addr,
                     z85, (int)dl, dom, d ? "the key is not in " : "no allow-list for this socket",
                     d ? (d->env ? d->env : "the allow-list") : "");
            if (z->quiet) log_warn("(%llu more refusals in the last second)", (unsigned long long)z->quiet);
            z->last_log_ms = now;
            z->quiet = 0;
        } else {
            z->quiet++;
        }
    }
    send_frame(z->rep, "1.0", 3, 1);
    send_frame(z->rep, zmq_msg_data(&fr[1]), zmq_msg_size(&fr[1]), 1);
    send_frame(z->rep, ok ? "200" : "400", 3, 1);
    send_frame(z->rep, ok ? "OK" : "key not allowed", ok ? 2 : 15, 1);
    send_frame(z->rep, user, strlen(user), 1);
    send_frame(z->rep, "", 0, 0);
    for (int i = 0; i < n; i++) zmq_msg_close(&fr[i]);
}

static void *run(void *arg)
{
    zap *z = arg;
    while (!__atomic_load_n(&z->stop, __ATOMIC_ACQUIRE)) {
        zmq_pollitem_t it = {z->rep, 0, ZMQ_POLLIN, 0};
        int r = zmq_poll(&it, 1, 100);
        if (r < 0 && zmq_errno() == ETERM) break;
        if (r > 0) handle(z);
    }
    zmq_close(z->rep);
    return NULL;
}

static zap *zap_start(void *ctx, char *err, size_t errcap)
{
    zap *z = calloc(1, sizeof *z);
    if (!z) {
        errf(err, errcap, "out of memory");
        return NULL;
    }
    int zero = 0;
    z->rep = zmq_socket(ctx, ZMQ_REP);
    if (z->rep) zmq_setsockopt(z->rep, ZMQ_LINGER, &zero, sizeof zero);
    if (!z->rep || zmq_bind(z->rep, ZAP_ENDPOINT) != 0) {
        errf(err, errcap, "cannot start the ZAP handler: %s", zmq_strerror(zmq_errno()));
        if (z->rep) zmq_close(z->rep);
        free(z);
        return NULL;
    }
    if (pthread_create(&z->thread, NULL, run, z) != 0) {
        errf(err, errcap, "cannot start the ZAP handler thread");
        zmq_close(z->rep);
        free(z);
        return NULL;
    }
    return z;
}

int zap_guard(zap **z, void *ctx, void *sock, const char *endpoint, const char *domain, const char *env,
              char *err, size_t errcap)
{
    if (strncmp(endpoint, "tcp://", 6) != 0 || !getenv("LLM_CURVE_SECRET")) return 0;
    const char *list = getenv(env);
    if (!list || !*list) {
        return errf(err, errcap, "%s is served with CURVE but %s is not set: list the public keys allowed to "
                    "connect (or '*' for any key pair)", endpoint, env);
    }
    if (!*z && !(*z = zap_start(ctx, err, errcap))) return -1;
    zap *h = *z;
    if (h->n_dom >= ZAP_MAX_DOMAINS || strlen(domain) >= sizeof h->dom[0].name) {
        return errf(err, errcap, "too many ZAP domains");
    }
    zap_domain d = {0};
    snprintf(d.name, sizeof d.name, "%s", domain);
    d.env = env;
    if (!(d.keys = malloc(ZAP_MAX_KEYS * sizeof *d.keys))) {
        return errf(err, errcap, "out of memory");
    }
    char perr[200];
    int n = zap_parse_list(list, d.keys, ZAP_MAX_KEYS, perr, sizeof perr);
    if (n == -1) {
        errf(err, errcap, "%s: %s", env, perr);
        free(d.keys);
        return -1;
    }
    d.any = n == -2;
    d.n = n < 0 ? 0 : n;
    if (d.any) log_warn("%s: %s='*': any CURVE key pair may connect (encrypted, not authenticated)", endpoint, env);
    else log_info("%s: CURVE clients limited to the %d keys of %s", endpoint, d.n, env);
    /* the handler thread reads dom[] only after a socket of this domain binds, which
     * happens after this store (zmq_bind, then the handshake, then the request) */
    h->dom[h->n_dom] = d;
    __atomic_store_n(&h->n_dom, h->n_dom + 1, __ATOMIC_RELEASE);
    if (zmq_setsockopt(sock, ZMQ_ZAP_DOMAIN, domain, strlen(domain)) != 0) {
        return errf(err, errcap, "ZMQ_ZAP_DOMAIN: %s", zmq_strerror(zmq_errno()));
    }
    return 0;
}

uint64_t zap_refused(const zap *z) { return z ? __atomic_load_n(&z->refused, __ATOMIC_RELAXED) : 0; }
uint64_t zap_accepted(const zap *z) { return z ? __atomic_load_n(&z->accepted, __ATOMIC_RELAXED) : 0; }

void zap_destroy(zap **zp)
{
    if (!zp || !*zp) return;
    zap *z = *zp;
    __atomic_store_n(&z->stop, 1, __ATOMIC_RELEASE);
    pthread_join(z->thread, NULL);
    for (int i = 0; i < z->n_dom; i++) free(z->dom[i].keys);
    free(z);
    *zp = NULL;
}
