/*
 * sparams.h - the sampling parameters and their wire form: what a request asks of the
 * sampler. The front door parses them once from text (llama.cpp names), the engine
 * worker and llmc read a few of them, and samplerd samples with them (sampler.h), so
 * they live here and not in samplerd/.
 *
 *   smp_params p = smp_params_default();
 *   char err[160];
 *   if (smp_param_set(&p, "top_p", "0.9", err, sizeof err) != 0 ||
 *       smp_params_validate(&p, n_vocab, err, sizeof err) != 0) { reply(err); return; }
 *   p.seed = smp_seed_resolve(p.seed);            // once per session
 *   uint8_t wire[SMP_WIRE_MAX];
 *   size_t n = smp_params_to_wire(&p, wire);      // ... and at the other end:
 *   smp_params_from_wire(wire, n, n_vocab, &q, err, sizeof err);
 *
 * Meanings that are ours (llama.cpp has no single documented answer) are listed in
 * samplerd/sampler.h's header comment; the field comments give defaults and ranges.
 *
 * Ownership: smp_params is a plain value (copy it freely, no pointers inside).
 */
#ifndef LLM_SPARAMS_H
#define LLM_SPARAMS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SMP_SEED_RANDOM     0xFFFFFFFFu
#define SMP_MAX_LOGIT_BIAS  256   /* entries in smp_params.logit_bias */
#define SMP_MAX_BREAKERS    16    /* DRY sequence breakers */
#define SMP_MAX_BREAKER_LEN 40    /* bytes per breaker (llama.cpp's limit) */
#define SMP_MAX_PROBS       100   /* n_probs upper bound */
#define SMP_MAX_ORDER       16    /* letters in smp_params.order */

/* Sampler letters in smp_params.order (llama.cpp's --sampling-seq letters). */
#define SMP_ORDER_DEFAULT "edskypmxt"

typedef struct {
    int32_t id;
    float   bias;          /* added to the logit; -INFINITY bans the token */
} smp_bias;

typedef struct {
    char    s[SMP_MAX_BREAKER_LEN + 1]; /* NUL-terminated; may not contain NUL */
    uint8_t len;
} smp_breaker;

/* Every knob, llama.cpp names in comments where the field name differs. */
typedef struct {
    float    temperature;         /* "temperature"/"temp" 0.8; 0 = greedy; >= 0 */
    float    dynatemp_range;      /* 0; >= 0; temperature +- range by entropy */
    float    dynatemp_exponent;   /* 1; >= 0 */
    int32_t  top_k;               /* 40; 0/-1 disabled */
    float    top_p;               /* 0.95; [0,1], 1 disabled */
    float    min_p;               /* 0.05; [0,1], 0 disabled */
    float    typical_p;           /* "typical_p"/"typ_p" 1.0; (0,1], 1 disabled */
    float    top_n_sigma;         /* -1; <= 0 disabled */
    float    xtc_probability;     /* 0; [0,1] */
    float    xtc_threshold;       /* 0.1; [0,1], > 0.5 disabled */
    float    repeat_penalty;      /* 1.0; > 0 */
    int32_t  repeat_last_n;       /* 64; -1 whole history, 0 disabled */
    float    frequency_penalty;   /* 0 */
    float    presence_penalty;    /* 0 */
    float    dry_multiplier;      /* 0 = DRY disabled; >= 0 */
    float    dry_base;            /* 1.75; >= 1 */
    int32_t  dry_allowed_length;  /* 2; >= 0 */
    int32_t  dry_penalty_last_n;  /* -1 whole history; 0 disabled */
    int32_t  n_breakers;          /* default 4: "\n" ":" "\"" "*" */
    smp_breaker breakers[SMP_MAX_BREAKERS];
    int32_t  mirostat;            /* 0, 1 or 2 */
    float    mirostat_tau;        /* 5.0; >= 0 */
    float    mirostat_eta;        /* 0.1; >= 0 */
    int32_t  min_keep;            /* 0; >= 0 */
    bool     ignore_eos;          /* false: true bans eos_id */
    bool     post_sampling_probs; /* false: n_probs from the raw row; true: final dist */
    int32_t  n_probs;             /* 0; [0, SMP_MAX_PROBS] */
    uint32_t seed;                /* SMP_SEED_RANDOM: see smp_seed_resolve */
    char     order[SMP_MAX_ORDER + 1]; /* "samplers"/"sampling_seq": letters e d s k y p m x t */
    int32_t  n_logit_bias;
    smp_bias logit_bias[SMP_MAX_LOGIT_BIAS];
} smp_params;
_Static_assert(sizeof(smp_params) == 2848, "smp_params is a wire format (smp_params_to_wire): change both ends");

/* ---- parameters (sparams.c) ---- */

/* llama.cpp's defaults (see the field comments); seed = SMP_SEED_RANDOM. */
smp_params smp_params_default(void);

/* Parses value for the parameter named name (llama.cpp names and aliases, see
 * smp_param_name) into p. Returns 0, or -1 with "<name>: <what is wrong>" in err and p
 * unchanged. Checks the range of that one value; cross checks are smp_params_validate.
 * Lists: "logit_bias" appends "ID:BIAS" / "ID+BIAS" / "ID-BIAS" entries separated by
 * ',' (BIAS may be -inf or false = ban), "none" clears; "dry_sequence_breakers" takes a
 * JSON array of strings and replaces the list; "dry_sequence_breaker" appends one raw
 * string ("none" clears); "samplers" takes names separated by ';' or ',' (penalties dry
 * top_n_sigma top_k typ_p top_p min_p xtc temperature, and llama.cpp's aliases) and
 * "sampling_seq" letters; both replace the order. Booleans: 1/0/true/false. */
int smp_param_set(smp_params *p, const char *name, const char *value, char *err, size_t errlen);
/* 1 when name is a parameter smp_param_set knows (a name or an alias). */
int smp_param_known(const char *name);

/* Formats the parameter as text that smp_param_set parses back to the same value.
 * Returns the length written (truncated to buflen - 1), or -1 for an unknown name. */
int smp_param_format(const smp_params *p, const char *name, char *buf, size_t buflen);

/* The i-th canonical parameter name (0 <= i < smp_param_count()), NULL past the end. */
const char *smp_param_name(int i);
int smp_param_count(void);

/* Checks every field's range and the vocabulary-dependent ones (logit_bias ids must be
 * < n_vocab). Returns 0, or -1 with an error naming the parameter. */
int smp_params_validate(const smp_params *p, int n_vocab, char *err, size_t errlen);

/* Appends one logit bias entry. Returns 0, or -1 naming logit_bias (full, bad id/bias). */
int smp_params_add_bias(smp_params *p, int32_t id, float bias, char *err, size_t errlen);

/* Replaces the DRY breakers by n strings (lens[i] bytes each; lens NULL: strlen). */
int smp_params_set_breakers(smp_params *p, const char *const *strs, const size_t *lens,
                            int n, char *err, size_t errlen);

/* The wire form of smp_params, sent between daemons so that parameters are parsed once
 * (at the front door) and not from strings on every token: a 4-byte magic, then the
 * struct's bytes up to the logit_bias entries in use (SMP_WIRE_MAX at most). Both ends
 * are built from this header (the size is pinned below); the reader checks the magic,
 * the length, every bool and string, then smp_params_validate. */
#define SMP_WIRE_MAGIC 0x31504d53u /* "SMP1" little-endian */
#define SMP_WIRE_MAX   (4 + sizeof(smp_params))
/* Writes p's wire form into buf (SMP_WIRE_MAX bytes) and returns its length. */
size_t smp_params_to_wire(const smp_params *p, uint8_t *buf);
/* Reads a wire form of len bytes into *p and validates it for n_vocab. 0, or -1 with
 * an error naming what was wrong (p is then unspecified). */
int smp_params_from_wire(const void *data, size_t len, int n_vocab, smp_params *p, char *err, size_t errlen);

/* How many trailing history tokens the penalties and DRY read; -1: all of them. */
int smp_history_needed(const smp_params *p);

/* seed unchanged unless SMP_SEED_RANDOM, then a fresh random seed (getrandom) that is
 * itself never SMP_SEED_RANDOM. Call once per session, not per step. */
uint32_t smp_seed_resolve(uint32_t seed);

/* splitmix64's finaliser: a bijection on 64 bits with full avalanche. The sampler's RNG
 * keys on it, and the seed's time fallback is spread by it. */
uint64_t smp_mix64(uint64_t x);

#endif
