/*
 * sampler.h - turn one row of logits into a token: llama.cpp's whole sampling chain,
 * reproducible from (seed, session, step) alone, without sorting the whole row.
 *
 *   smp_params p = smp_params_default();
 *   char err[160];
 *   if (smp_param_set(&p, "top_p", "0.9", err, sizeof err) != 0 ||
 *       smp_params_validate(&p, n_vocab, err, sizeof err) != 0) { reply(err); return; }
 *   smp_work *w = smp_work_new(n_vocab);            // one per thread, reused per row
 *   smp_work_load_pieces(w, n_vocab, piece_writer, vocab); // token text, for DRY only
 *   smp_state st;
 *   smp_state_init(&st, &p, session_id);             // mu = 2 tau, step 0
 *   smp_result r;
 *   int tok = smp_sample(&p, &st, logits, n_vocab, hist, n_hist, eos_id, &r, w);
 *   if (tok < 0) reply(r.err);       // else st.step (and mirostat's mu) moved on
 *   smp_work_destroy(&w);
 *
 * Chain (mirostat 0): logit_bias, ignore_eos, then the samplers in p.order (default
 * "edskypmxt": penalties, DRY, top_n_sigma, top_k, typical_p, top_p, min_p, XTC,
 * temperature/dynatemp), then one draw from the remaining distribution. Mirostat 1/2:
 * logit_bias, ignore_eos, penalties, DRY, temperature, mirostat (llama.cpp applies no
 * penalties under mirostat; here they apply when enabled, which by default they are not).
 * temperature 0 is greedy: the highest logit after bias/penalties, ties to the lowest id.
 * ignore_eos bans only the eos_id given to smp_sample; ban other end-of-generation ids
 * with logit_bias -inf.
 *
 * Speed: the row stays a dense array while samplers only adjust logits (bias,
 * penalties, DRY touch just the ids concerned) and leaves it through one selection pass:
 * a k-heap for top-k, a filter for min-p, logit bins for top-p, argmax for greedy. No
 * sampler sorts more than the tokens it keeps. bench/bench_sampler has the figures.
 *
 * Meanings that are ours (llama.cpp has no single documented answer):
 *   top_k 0 or -1: disabled; below -1 rejected; above n_vocab: the whole row.
 *   repeat_last_n / dry_penalty_last_n -1: the whole history given; 0: disabled.
 *   seed SMP_SEED_RANDOM (-1 / 0xFFFFFFFF) is NOT random here: the library has no hidden
 *   state. The front end replaces it once per session with smp_seed_resolve() and carries
 *   the result, so retries and restarts reproduce.
 *   Logits: NaN becomes -inf (never chosen), +inf becomes FLT_MAX (dominates), -inf stays.
 *   A row with no finite logit left (after bias too) is an error, not a crash.
 *   DRY without token text (no smp_work_load_pieces / smp_work_set_pieces): sequence
 *   breakers cannot be seen, so DRY is skipped and smp_result.warn says so (logged
 *   once per smp_work).
 *
 * Randomness: draw d of step s of session q with seed z is
 *   u = smp_rng_uniform(z, q, s, d)  in [0, 1)
 * a pure hash (splitmix64 rounds), so every process computes the same u. d = 0 is the
 * final draw, d = 1 XTC's coin. The arithmetic around it is the same bits at every SIMD
 * level (one summation order, no FMA), so samplerds on different CPUs agree too.
 *
 * Ownership: smp_params and smp_state are plain values (copy them freely, no pointers
 * inside). smp_work is owned by its creator, used by one thread at a time, and holds
 * the piece callback's ctx pointer without owning it. Nothing is allocated per row
 * once the work has seen the largest vocabulary and history.
 */
#ifndef LLM_SAMPLER_H
#define LLM_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sparams.h" /* smp_params, its parsing and wire form */

/* The state that travels with a request: any instance given it returns the same token.
 * The token history (prompt + generated, oldest first) is passed beside it. */
typedef struct {
    uint64_t session;   /* keys the RNG together with seed and step */
    uint32_t step;      /* index of the token being sampled; smp_sample increments it */
    float    mu;        /* mirostat's running max surprise; valid if mu_set */
    uint8_t  mu_set;    /* 0 (or mu not finite): smp_sample starts at 2 * mirostat_tau */
} smp_state;

typedef struct {
    int32_t id;
    float   logprob;    /* natural log of the probability */
} smp_logprob;

typedef struct {
    int32_t     token;          /* chosen id, or -1 on error */
    float       logprob;        /* chosen token's log-prob (same source as probs) */
    int32_t     n_probs;        /* entries in probs, <= params.n_probs */
    smp_logprob probs[SMP_MAX_PROBS]; /* most probable first, ties to the lowest id */
    int32_t     n_candidates;   /* tokens left when the final draw was made */
    float       mu;             /* mirostat mu after this step (also written to state) */
    uint32_t    step;           /* the step this token was sampled at */
    const char *warn;           /* static string or NULL: e.g. DRY skipped */
    char        err[160];       /* set when token == -1 */
} smp_result;

/* Returns the token text of id (not NUL-terminated, *len bytes), or NULL if unknown.
 * "Text" means the bytes detokenization would produce (byte tokens decoded). The
 * pointer must stay valid until smp_sample returns (DRY holds several at once): point
 * into a table, not into one reused buffer. smp_work_load_pieces builds such a table. */
typedef const char *(*smp_piece_fn)(void *ctx, int32_t id, size_t *len);

/* Writes id's text to buf (at most cap bytes) and returns its full length, or < 0 for
 * no text; the shape of tok_piece (tok/tok.h) minus its render_special flag. */
typedef int (*smp_piece_write_fn)(void *ctx, int32_t id, char *buf, size_t cap);

typedef struct smp_work smp_work;

/* ---- randomness (sampler_rng.c) ---- */

/* A pure function: uniform in [0, 1) with 53 random bits. */
double smp_rng_uniform(uint32_t seed, uint64_t session, uint32_t step, uint32_t draw);
/* The 64-bit hash behind it. */
uint64_t smp_rng_u64(uint32_t seed, uint64_t session, uint32_t step, uint32_t draw);

/* ---- sampling (sampler.c) ---- */

/* Starts a session's carried state: step 0, mu = 2 * mirostat_tau. */
void smp_state_init(smp_state *st, const smp_params *p, uint64_t session);

/* Scratch for rows of up to n_vocab entries (grows by itself for larger rows).
 * NULL on allocation failure. */
smp_work *smp_work_new(int n_vocab);
/* Frees the work and sets *w to NULL; accepts NULL and *w == NULL. */
void smp_work_destroy(smp_work **w);
/* Gives DRY the token text; fn NULL disables DRY (with a warning if it is asked for). */
void smp_work_set_pieces(smp_work *w, smp_piece_fn fn, void *ctx);
/* Copies the text of ids [0, n_vocab) into the work, asking fn, and gives DRY that
 * table (about 1 MB for 152k tokens; freed with the work or by the next load/set).
 * Returns 0, or -1 when out of memory (DRY then has no text). E.g. with tokenizerd:
 *   static int piece(void *v, int32_t id, char *b, size_t cap)
 *   { return tok_piece(v, id, false, b, cap); }
 *   smp_work_load_pieces(w, tok_n_vocab(vocab), piece, vocab); */
int smp_work_load_pieces(smp_work *w, int n_vocab, smp_piece_write_fn fn, void *ctx);
/* A ready-made piece function over an array of n NUL-terminated strings:
 * smp_work_set_pieces(w, smp_piece_array, &arr) with arr = {strs, n}. */
typedef struct { const char *const *strs; int32_t n; } smp_piece_table;
const char *smp_piece_array(void *ctx, int32_t id, size_t *len);

/* Samples one token from logits[n_vocab] (not modified) with parameters p (checked
 * with smp_params_validate on every call) and history[n_history] (prompt and
 * generated tokens, oldest first; ids outside [0, n_vocab) are ignored). eos_id < 0: none.
 * Returns the token (also out->token) and advances st (step + 1, mirostat mu); or -1 with
 * out->err set and st unchanged (bad row, bad arguments, out of memory). */
int smp_sample(const smp_params *p, smp_state *st, const float *logits, int n_vocab,
               const int32_t *history, int n_history, int eos_id, smp_result *out,
               smp_work *w);

/* Whether p bans token id whatever its logit: eos_id under ignore_eos, or a logit_bias
 * of -inf. smp_sample never chooses such a token; a mask that leaves only banned tokens
 * leaves none (samplerd's grammar masks count on this). */
bool smp_banned(const smp_params *p, int32_t id, int eos_id);

/* ---- the individual samplers over a candidate array (sampler_ops.c) ----
 * smp_sample runs these; they are public so tests can check each one on small rows.
 * Each follows llama.cpp's sampler of the same name; min_keep as there. */

typedef struct {
    int32_t id;
    float   logit;
    float   p;          /* valid right after smp_softmax */
} smp_tok;

/* Invariant: data[0, n_sorted) is ordered by logit descending, ties by id ascending,
 * and no entry after it is ordered before it. Samplers keep n_sorted truthful. */
typedef struct {
    smp_tok *data;
    int32_t  n;
    int32_t  n_sorted;
} smp_cands;

/* exp(x) within 2 ulp of expf (Cephes' polynomial), 0 below -87.3 and for NaN; the
 * SSE2 and AVX2 paths give the same bits. smp_expf_n: out[i] = smp_expf(x[i]).
 * smp_sum_exp: the sum over i of smp_expf(x[i] - shift), in double, added in one fixed
 * order (entry i into lane i % 4, lanes pairwise, then the tail) at every SIMD level. */
float smp_expf(float x);
/* Caps the SIMD used by the exp-based loops: 0 scalar, 1 SSE2, 2 AVX2 (the default, each
 * used only if the CPU has it); returns the previous cap. All levels give the same
 * bits; tests use this to check that. Process-wide: set it before sampling starts. */
int smp_simd_limit(int level);
void smp_expf_n(const float *x, float *out, int n);
double smp_sum_exp(const float *x, int n, float shift);
/* p = softmax(logit) over the n candidates (order unchanged); -inf logits get p 0. */
void smp_softmax(smp_cands *c);
/* Makes at least min(m, n) leading entries sorted (partial selection, not a full sort). */
void smp_sort_prefix(smp_cands *c, int m);
/* Writes the min(k, finite count) best entries of logits[n] to out, sorted; returns how
 * many. One pass with a k-heap and a 16-wide skip test: O(n) for small k. */
int smp_top_k_dense(const float *logits, int n, int k, smp_tok *out);
/* top-p (min_keep 0 or 1) straight from a row: writes the kept tokens to out (room for n;
 * in no particular order; p not computed) and returns how many. Bins by logit below
 * the max instead of sorting: three passes over the row. */
int smp_top_p_dense(const float *logits, int n, float p, smp_tok *out);
/* Index of the highest logit, ties to the lowest index; -1 if none is above -inf. */
int smp_argmax(const float *logits, int n);

void smp_top_k(smp_cands *c, int k, int min_keep);       /* k <= 0: no-op */
void smp_top_p(smp_cands *c, float p, int min_keep);     /* p >= 1: no-op */
void smp_min_p(smp_cands *c, float p, int min_keep);     /* p <= 0: no-op */
void smp_typical(smp_cands *c, float p, int min_keep);   /* p >= 1: no-op; leaves it unsorted */
void smp_top_n_sigma(smp_cands *c, float nsig);          /* nsig <= 0: no-op */
/* u: the step's XTC coin; acts when u <= prob and threshold <= 0.5. */
void smp_xtc(smp_cands *c, float prob, float threshold, int min_keep, double u);
/* t <= 0: only the best (ties to the lowest id) survives; range > 0: dynatemp. */
void smp_temperature(smp_cands *c, float t, float range, float exponent);
/* Mirostat v1 (m most probable tokens estimate s_hat) and v2; both draw with u, update
 * *mu and return the chosen index into c->data. */
int smp_mirostat(smp_cands *c, int n_vocab, float tau, float eta, int m, float *mu, double u);
int smp_mirostat_v2(smp_cands *c, float tau, float eta, float *mu, double u);
/* Draws an index into c->data with probability p (recomputed) using u in [0, 1): the
 * first entry, in the array's current order, where the running sum of p passes u. */
int smp_dist(smp_cands *c, double u);

/* Repetition/frequency/presence penalties from the last repeat_last_n of history, and
 * DRY, applied to the candidates (ids outside the work's vocabulary are ignored).
 * smp_dry returns 0, 1 if it was skipped for want of token text, -1 out of memory. */
void smp_penalties(smp_cands *c, const smp_params *p, const int32_t *history, int n_history,
                   smp_work *w);
int smp_dry(smp_cands *c, const smp_params *p, const int32_t *history, int n_history,
            smp_work *w);

#endif
