/* Tests for common/net's run directory: where it is, what is refused (a symbolic link,
 * another owner, a mode others can enter, a file), that endpoints and files stay in the
 * verified directory when its name is swapped afterwards, and that sockets are 0600
 * whatever the umask. Suite "net" (the socket helpers are tested in check_proto.c). */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net.h"

static char base[64]; /* a fresh directory per test, removed with what is in it */

static void base_setup(void)
{
    snprintf(base, sizeof base, "/tmp/llm-check-net-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(base));
}

static void base_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", base);
    ck_assert_int_eq(system(cmd), 0);
}

static void in_base(char *out, size_t cap, const char *name) { snprintf(out, cap, "%s/%s", base, name); }

/* The type and mode bits of path (not following a link), or -1 when it does not exist. */
static int mode_of(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 ? (int)(st.st_mode & (S_IFMT | 07777)) : -1;
}

/* A ROUTER bound to endpoint ep of dir, and a DEALER that reaches it through ep. */
static void bind_and_reach(const char *dir, net_ep ep)
{
    char e[300];
    net_endpoint(dir, ep, e, sizeof e);
    void *ctx = zmq_ctx_new(), *r = net_socket(ctx, ZMQ_ROUTER), *d = net_socket(ctx, ZMQ_DEALER);
    ck_assert_msg(net_bind(r, e) == 0, "bind %s: %s", e, zmq_strerror(zmq_errno()));
    ck_assert_int_eq(zmq_connect(d, e), 0);
    ck_assert_int_eq(zmq_send(d, "hi", 2, 0), 2);
    char buf[NET_RID_MAX];
    ck_assert_int_gt(zmq_recv(r, buf, sizeof buf, 0), 0); /* routing id */
    ck_assert_int_eq(zmq_recv(r, buf, sizeof buf, 0), 2);
    net_close(&d);
    net_close(&r);
    zmq_ctx_term(ctx);
}

START_TEST(test_run_dir_where)
{
    char want[128], out[256], err[256], ep[300];
    in_base(want, sizeof want, "run");
    ck_assert_int_eq(net_run_dir(want, out, sizeof out, err, sizeof err), 0);
    ck_assert_str_eq(out, want); /* the path as named, for messages */
    ck_assert_int_eq(mode_of(want), 040700);
    setenv("LLM_RUN_DIR", want, 1); /* the environment when no flag */
    ck_assert_int_eq(net_run_dir(NULL, out, sizeof out, err, sizeof err), 0);
    ck_assert_str_eq(out, want);
    unsetenv("LLM_RUN_DIR");
    net_endpoint(want, NET_EP_SAMPLER, ep, sizeof ep); /* through the held descriptor */
    ck_assert_msg(strncmp(ep, "ipc:///proc/self/fd/", 20) == 0 && strstr(ep, "/sampler.sock"), "%s", ep);
    ck_assert_str_eq(net_ipc_path(ep), ep + 6);
    char shown[300], named[300];
    snprintf(named, sizeof named, "ipc://%s/sampler.sock", want); /* for messages */
    ck_assert_str_eq(net_display(ep, shown, sizeof shown), named);
    bind_and_reach(want, NET_EP_SAMPLER);
    in_base(out, sizeof out, "run/sampler.sock");
    ck_assert_int_eq(mode_of(out) & S_IFMT, S_IFSOCK);
    setenv("LLM_SAMPLER", "tcp://10.0.0.1:5555", 1);
    net_endpoint(want, NET_EP_SAMPLER, ep, sizeof ep);
    ck_assert_str_eq(ep, "tcp://10.0.0.1:5555");
    ck_assert_ptr_null(net_ipc_path(ep));
    ck_assert_str_eq(net_display(ep, shown, sizeof shown), "tcp://10.0.0.1:5555");
    unsetenv("LLM_SAMPLER");
    char longer[200];
    snprintf(longer, sizeof longer, "%s/%090d", base, 0);
    ck_assert_int_eq(net_run_dir(longer, out, sizeof out, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "too long"), "%s", err);
}
END_TEST

/* The audit's attack: another user points /tmp/llm-UID at a 0700 directory of ours,
 * which passed a stat(2) of the name; then swaps it to their own. Refused at once. */
START_TEST(test_run_dir_symlink)
{
    char real[128], link[128], dangling[128], out[256], err[256];
    in_base(real, sizeof real, "real");
    in_base(link, sizeof link, "link");
    in_base(dangling, sizeof dangling, "dangling");
    ck_assert_int_eq(mkdir(real, 0700), 0);
    ck_assert_int_eq(symlink(real, link), 0);
    ck_assert_int_eq(net_run_dir(link, out, sizeof out, err, sizeof err), -1);
    ck_assert_msg(strstr(err, link) && strstr(err, "is a symbolic link"), "%s", err);
    ck_assert_int_eq(symlink("/nonexistent/llm", dangling), 0); /* mkdir sees EEXIST */
    ck_assert_int_eq(net_run_dir(dangling, out, sizeof out, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is a symbolic link"), "%s", err);
    ck_assert_int_eq(mode_of(real), 040700);
}
END_TEST

START_TEST(test_run_dir_not_ours)
{
    char dir[128], file[128], out[256], err[256];
    in_base(dir, sizeof dir, "open");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    chmod(dir, 0755); /* others may enter */
    ck_assert_int_eq(net_run_dir(dir, out, sizeof out, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "has mode 755; it must be 0700"), "%s", err);
    in_base(file, sizeof file, "file");
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(net_run_dir(file, out, sizeof out, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is not a directory"), "%s", err);
    in_base(dir, sizeof dir, "theirs");
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    if (chown(dir, 65534, 65534) != 0) {
        /* only root can give a directory away: the owner check is not run */
        ck_assert_int_eq(errno, EPERM);
        return;
    }
    ck_assert_int_eq(net_run_dir(dir, out, sizeof out, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "belongs to uid 65534, not to us"), "%s", err);
}
END_TEST

/* The name is swapped after the check: the directory moved away and a symlink to
 * someone else's directory put in its place. Binds, connects and files still go to the
 * verified directory; a new check of the name refuses it. */
START_TEST(test_run_dir_swapped)
{
    char run[128], moved[128], theirs[128], path[256], out[256], err[256];
    in_base(run, sizeof run, "run");
    in_base(moved, sizeof moved, "moved");
    in_base(theirs, sizeof theirs, "theirs");
    ck_assert_int_eq(net_run_dir(run, out, sizeof out, err, sizeof err), 0);
    ck_assert_int_eq(rename(run, moved), 0);
    ck_assert_int_eq(mkdir(theirs, 0777), 0);
    ck_assert_int_eq(symlink(theirs, run), 0);
    bind_and_reach(run, NET_EP_FRONT);
    bind_and_reach(run, NET_EP_WORKERS);
    net_run_path(run, "segment", path, sizeof path);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    const char *names[3] = {"front.sock", "workers.sock", "segment"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", moved, names[i]);
        ck_assert_msg(mode_of(path) >= 0, "%s is not in the verified directory", names[i]);
        snprintf(path, sizeof path, "%s/%s", theirs, names[i]);
        ck_assert_msg(mode_of(path) < 0, "%s went to the directory swapped in", names[i]);
    }
    ck_assert_int_eq(net_run_dir(run, out, sizeof out, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "is a symbolic link"), "%s", err);
}
END_TEST

START_TEST(test_socket_mode)
{
    char run[128], out[256], err[256];
    in_base(run, sizeof run, "run");
    mode_t old = umask(022);
    ck_assert_int_eq(net_run_dir(run, out, sizeof out, err, sizeof err), 0);
    bind_and_reach(run, NET_EP_FRONT);
    ck_assert_int_eq(umask(old), 022); /* the process's umask is left as it was */
    in_base(out, sizeof out, "run/front.sock");
    ck_assert_int_eq(mode_of(out), S_IFSOCK | 0600);
}
END_TEST

Suite *net_suite(void)
{
    Suite *s = suite_create("net");
    TCase *tc = tcase_create("run directory");
    tcase_set_timeout(tc, 20);
    tcase_add_checked_fixture(tc, base_setup, base_teardown);
    tcase_add_test(tc, test_run_dir_where);
    tcase_add_test(tc, test_run_dir_symlink);
    tcase_add_test(tc, test_run_dir_not_ours);
    tcase_add_test(tc, test_run_dir_swapped);
    tcase_add_test(tc, test_socket_mode);
    suite_add_tcase(s, tc);
    return s;
}
