/*
 * handle.h - the engine handle's constructor and mapping, shared by forward.c (which
 * owns struct eng_model) and open.c (which decides which segment to map). Private to
 * engined/.
 *
 *   seg_map sm;  ... seg_attach(name, &sm, ...) ...
 *   eng_model *m = eng_handle_new(&sm, err, sizeof err);   // takes sm over
 */
#ifndef LLM_HANDLE_H
#define LLM_HANDLE_H

#include <stddef.h>

#include "engine.h"
#include "segment.h"

/* Builds the handle around a READY read-only mapping, taking ownership of it (it is
 * unmapped on failure too): checks the configuration, binds the weights, picks the
 * kernels, starts the default thread pool. NULL with err on a bad segment. */
eng_model *eng_handle_new(seg_map *sm, char *err, size_t errlen);

/* The handle's mapping of its segment. */
const seg_map *eng_handle_map(const eng_model *m);

#endif
