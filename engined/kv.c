/*
 * kv.c - KV cache storage. Owned by the engine.
 */
#include "kv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "log.h"
#include "errcode.h"

int kv_init(kv_cache *kv, int n_layer, int n_ctx, int64_t kv_dim, eng_kv_type type,
            char *err, size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    if (n_layer <= 0 || n_ctx <= 0 || kv_dim <= 0 || (type != ENG_KV_F16 && type != ENG_KV_F32)) {
        return errf(err, errlen, "KV cache: invalid sizes (layers %d, n_ctx %d, kv_dim %lld) or type %d",
                    n_layer, n_ctx, (long long)kv_dim, (int)type);
    }
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    kv->type = type;
    kv->elt = type == ENG_KV_F16 ? 2 : 4;
    kv->n_tiles = (n_ctx + 15) / 16;
    size_t bytes = (size_t)n_layer * (size_t)n_ctx * (size_t)kv_dim * kv->elt;
    kv->k = calloc(1, (size_t)n_layer * (size_t)kv->n_tiles * 16 * (size_t)kv_dim * kv->elt);
    kv->v = calloc(1, bytes);
    if (!kv->k || !kv->v) {
        errf(err, errlen, "KV cache: out of memory for 2 x %.1f MB", bytes / 1e6);
        kv_free(kv);
        return -1;
    }
    return 0;
}

void kv_free(kv_cache *kv)
{
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

void kv_store(kv_cache *kv, int layer, int pos, const float *k, const float *v)
{
    LLM_ASSERT(layer >= 0 && layer < kv->n_layer && pos >= 0 && pos < kv->n_ctx);
    char *kt = (char *)kv_ktile(kv, layer, pos / 16) + (size_t)(pos % 16) * kv->elt;
    void *vd = (void *)kv_v(kv, layer, pos);
    if (kv->type == ENG_KV_F16) {
        uint16_t h[256];
        for (int64_t i0 = 0; i0 < kv->kv_dim; i0 += 256) {
            int64_t n = kv->kv_dim - i0 < 256 ? kv->kv_dim - i0 : 256;
            kern_f32_to_f16(k + i0, h, n);
            for (int64_t i = 0; i < n; i++) ((uint16_t *)kt)[(i0 + i) * 16] = h[i];
        }
        kern_f32_to_f16(v, vd, kv->kv_dim);
    } else {
        for (int64_t i = 0; i < kv->kv_dim; i++) ((float *)kt)[i * 16] = k[i];
        memcpy(vd, v, (size_t)kv->kv_dim * sizeof(float));
    }
}
