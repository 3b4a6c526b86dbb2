/* callsite.c - call-site names for the arrival trace and the schedule cache.
 *
 * A call site is named by the application (collsched_label for the thread's next call,
 * PAT_Label for all its calls until cleared) or by the caller's return address, resolved
 * with dladdr to "function+0xOFF" (offset from the symbol) or, when the symbol is not in
 * the dynamic symbol table (executables not linked with -rdynamic), "module+0xOFF"
 * (offset from the module's load address): both survive address-space randomisation,
 * so every rank of one executable names one source line alike.
 *
 * Labels are per thread (MPI_THREAD_MULTIPLE: two threads label their own calls). Under
 * SMPI the ranks are actors of one OS thread whose globals SimGrid privatises per rank, so
 * plain statics are per rank there and thread-local storage would be shared.
 */
#define _GNU_SOURCE /* dladdr, Dl_info */
#include "runtime.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#define LABEL_MAX 63

#ifndef SMPI_HELPERS_H
#include <pthread.h>
#define CS_THREAD_LOCAL _Thread_local
static pthread_mutex_t sites_mu = PTHREAD_MUTEX_INITIALIZER;
#define SITES_LOCK() pthread_mutex_lock(&sites_mu)
#define SITES_UNLOCK() pthread_mutex_unlock(&sites_mu)
#else
#define CS_THREAD_LOCAL
#define SITES_LOCK() ((void)0)
#define SITES_UNLOCK() ((void)0)
#endif

/* once: for the thread's next call only; sticky: PAT_Label's, until cleared. */
static CS_THREAD_LOCAL char label_once[LABEL_MAX + 1], label_sticky[LABEL_MAX + 1];
static CS_THREAD_LOCAL char label_taken[LABEL_MAX + 1]; /* the running call's one-shot label */

/* 1..63 printable ASCII characters, no spaces: a name that is one token in every report. */
static int label_ok(const char *s)
{
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= LABEL_MAX || s[n] <= ' ' || s[n] > '~') return 0;
    return n > 0;
}

static int set_label(char *slot, const char *label)
{
    if (!label || !*label) {
        slot[0] = '\0';
        return MPI_SUCCESS;
    }
    if (!label_ok(label)) return MPI_ERR_ARG;
    strcpy(slot, label);
    return MPI_SUCCESS;
}

int collsched_label(const char *label) { return set_label(label_once, label); }

int PAT_Label(const char *label) { return set_label(label_sticky, label); }

/* The one-shot label is taken once, at the call's entry, so that everyone who names the
 * same call (selection, the trace) sees the same name and the next call does not. */
const char *cs_call_label_take(void)
{
    if (label_once[0]) {
        memcpy(label_taken, label_once, sizeof label_taken);
        label_once[0] = '\0';
        return label_taken;
    }
    return label_sticky[0] ? label_sticky : NULL;
}

/* Resolved addresses: a small direct-mapped table (a collision only costs a dladdr). */
#define SITE_SLOTS 256
#define SITE_NAME 96
static struct { const void *addr; char name[SITE_NAME]; } site_cache[SITE_SLOTS];

/* A name fit for the trace: printable, no spaces (module paths may have them). */
static void clean(char *s)
{
    for (; *s; s++)
        if (*s <= ' ' || *s > '~') *s = '_';
}

/* SimGrid SMPI runs every rank from its own copy of the program, TMPDIR/NAME_PID_RANK.so
 * (smpi/privatization:dlopen): the copy's suffix goes, so that all ranks name one site
 * alike ("NAME+0xOFF", as a real MPI job names it). */
static void smpi_module_name(char *mod)
{
#ifdef SMPI_HELPERS_H
    size_t n = strlen(mod);
    if (n < 7 || strcmp(mod + n - 3, ".so") != 0) return;
    size_t i = n - 3, underscores = 0;
    while (i > 0 && underscores < 2) {
        char c = mod[i - 1];
        if (c == '_') underscores++;
        else if (c < '0' || c > '9') return;
        i--;
    }
    if (underscores == 2 && i > 0 && mod[i + 1] != '_') mod[i] = 0;
#else
    (void)mod;
#endif
}

static void resolve(const void *addr, char *out, size_t len)
{
    Dl_info info;
    memset(&info, 0, sizeof info);
    if (!addr || !dladdr(addr, &info)) {
        snprintf(out, len, "?");
        return;
    }
    if (info.dli_sname && info.dli_saddr) {
        snprintf(out, len, "%s+0x%lx", info.dli_sname,
                 (unsigned long)((const char *)addr - (const char *)info.dli_saddr));
    } else {
        const char *mod = info.dli_fname && *info.dli_fname ? info.dli_fname : "?";
        const char *slash = strrchr(mod, '/');
        char base[SITE_NAME - 24]; /* room for "+0x" and 16 hex digits */
        snprintf(base, sizeof base, "%s", slash ? slash + 1 : mod);
        smpi_module_name(base);
        snprintf(out, len, "%s+0x%lx", base,
                 (unsigned long)((const char *)addr - (const char *)info.dli_fbase));
    }
    clean(out);
}

void cs_call_site(const cs_call_ctx *ctx, char *out, size_t len)
{
    if (!len) return;
    if (ctx->label) {
        snprintf(out, len, "%s", ctx->label);
        return;
    }
    size_t k = ((uintptr_t)ctx->site >> 2) % SITE_SLOTS;
    SITES_LOCK();
    if (ctx->site && site_cache[k].addr == ctx->site) {
        snprintf(out, len, "%s", site_cache[k].name);
        SITES_UNLOCK();
        return;
    }
    SITES_UNLOCK();
    char name[SITE_NAME];
    resolve(ctx->site, name, sizeof name); /* dladdr takes the loader's lock: not under ours */
    SITES_LOCK();
    site_cache[k].addr = ctx->site;
    memcpy(site_cache[k].name, name, sizeof name);
    SITES_UNLOCK();
    snprintf(out, len, "%s", name);
}
