/*
 * tok_source.c - opening a model's tokenizer tables from its file or its weight segment.
 * See tok_source.h.
 */
#include "tok_source.h"

#include <string.h>

int tok_source_open(tok_source *s, const char *file, const char *segment, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (file)
        s->g = gguf_open(file, err, errlen);
    if (!s->g && segment)
        s->g = seg_tokenizer_open(segment, &s->seg, err, errlen);
    return s->g ? 0 : -1;
}

void tok_source_close(tok_source *s)
{
    gguf_close(s->g);
    seg_unmap(&s->seg);
    memset(s, 0, sizeof *s);
}
