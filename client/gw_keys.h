/*
 * gw_keys.h - the API keys the gateway accepts (owner: gateway), where they come from,
 * and the check of an Authorization header against them.
 *
 *   gwk_set k; gwk_init(&k);
 *   if (gwk_load_file(&k, "/etc/llm/api-keys", err, sizeof err) != 0) ...   // --api-key-file
 *   gwk_add(&k, "sk-local", err, sizeof err);                               // --api-key
 *   if (k.n == 0) gwk_add_list(&k, getenv("LLM_API_KEY"), err, sizeof err); // comma-separated
 *   if (!gwk_authorized(&k, MHD_lookup_connection_value(.., "Authorization"))) -> 401
 *   gwk_free(&k);
 *
 * A key on the command line is visible to every local user (ps -o args), so the
 * gateway warns about --api-key and recommends LLM_API_KEY or a key file. A key file
 * holds one key a line; blank lines and lines starting with # are skipped; like ssh
 * with a private key, the file must belong to the user the gateway runs as and give
 * no permission to group or others.
 *
 * Ownership: the set owns a copy of every key; gwk_free frees them (also after a
 * failed call, which may have added some).
 */
#ifndef LLM_GW_KEYS_H
#define LLM_GW_KEYS_H

#include <stdbool.h>
#include <stddef.h>

#define GWK_MAX_KEYS      16
#define GWK_MAX_FILE_SIZE (64 * 1024) /* bytes; a key file is a handful of lines */

typedef struct {
    char *keys[GWK_MAX_KEYS]; /* (n) NUL-terminated, owned */
    int   n;
} gwk_set;

void gwk_init(gwk_set *k);
void gwk_free(gwk_set *k);
/* Adds a copy of key (an empty key is ignored). -1 with err when the set is full. */
int gwk_add(gwk_set *k, const char *key, char *err, size_t errcap);
/* Adds each key of a comma-separated list (NULL: none). */
int gwk_add_list(gwk_set *k, const char *list, char *err, size_t errcap);
/* Adds the keys of a key file; -1 with err naming the file when it cannot be read, is
 * not private to its owner (the mode is named), holds no key, or holds too many. */
int gwk_load_file(gwk_set *k, const char *path, char *err, size_t errcap);
/* True when authorization is "Bearer KEY" for a key of the set, or the set is empty.
 * Compares in constant time, so the time taken does not reveal a key's prefix. */
bool gwk_authorized(const gwk_set *k, const char *authorization);

#endif
