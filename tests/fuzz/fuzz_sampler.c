/*
 * fuzz_sampler.c - libFuzzer harness: the sampler parameter parsers. Byte 0 even: the
 * rest is NUL-separated name, value, name, value... given to smp_param_set (as the front
 * door does with a client's "params"), then smp_params_validate; a valid set must
 * survive smp_params_to_wire -> smp_params_from_wire unchanged. Byte 0 odd: the rest is
 * a wire form given to smp_params_from_wire (as workers and samplerd do with "sp").
 * Built and run by `make fuzz`; seeds: every parameter with a typical value, and the
 * wire forms of a few sets (fuzz_seeds sampler).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sampler.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int quiet;
    if (!quiet++) log_init("fuzz", LOG_ERROR);
    if (size < 1) return 0;
    char err[256];
    smp_params p = smp_params_default(), q;
    if (data[0] & 1) {
        if (smp_params_from_wire(data + 1, size - 1, 32000, &q, err, sizeof err) == 0) {
            char buf[512];
            for (int i = 0; i < smp_param_count(); i++) smp_param_format(&q, smp_param_name(i), buf, sizeof buf);
        }
        return 0;
    }
    char *buf = malloc(size + 1);
    if (!buf) return 0;
    memcpy(buf, data, size);
    buf[size] = 0;
    for (size_t off = 1; off < size;) {
        const char *name = buf + off;
        off += strlen(name) + 1;
        const char *value = off <= size ? buf + off : "";
        off += strlen(value) + 1;
        smp_param_set(&p, name, value, err, sizeof err);
    }
    free(buf);
    if (smp_params_validate(&p, 32000, err, sizeof err) != 0) return 0;
    static uint8_t wire[SMP_WIRE_MAX];
    size_t n = smp_params_to_wire(&p, wire);
    if (smp_params_from_wire(wire, n, 32000, &q, err, sizeof err) != 0) abort(); /* a valid set must round-trip */
    uint8_t again[SMP_WIRE_MAX];
    if (smp_params_to_wire(&q, again) != n || memcmp(again, wire, n) != 0) abort();
    return 0;
}
