/* errcode.c - the error-code table's names and statuses (errcode.h). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "errcode.h"

static const struct {
    const char *name;
    int         status;
} codes[ERR_COUNT] = {
    [ERR_NONE] = {NULL, 0},
#define ERRCODE_ROW(id, name, status) [id] = {name, status},
    ERRCODES(ERRCODE_ROW)
#undef ERRCODE_ROW
};

const char *errcode_name(errcode c)
{
    return c > ERR_NONE && c < ERR_COUNT ? codes[c].name : NULL;
}

errcode errcode_from_name(const char *name)
{
    for (int c = ERR_NONE + 1; name && c < ERR_COUNT; c++)
        if (!strcmp(codes[c].name, name)) return (errcode)c;
    return ERR_NONE;
}

int errcode_http_status(errcode c)
{
    return c > ERR_NONE && c < ERR_COUNT ? codes[c].status : 0;
}

int errf(char *err, size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}
