/*
 * gpuslice cap shim: keeps a session's hard-cap variables as the node set them.
 *
 * HAMi-core and NVIDIA MPS clients read their limits from environment variables
 * (CUDA_DEVICE_MEMORY_LIMIT_<i>, CUDA_DEVICE_SM_LIMIT, CUDA_MPS_PINNED_DEVICE_MEM_LIMIT, ...),
 * which the session's user could unset or raise. This library is loaded into every process
 * of the session by /etc/ld.so.preload (a read-only, root-owned mount). It reads the caps
 * from /etc/gpuslice/hardcaps.env (read-only too, one NAME=value per line) and
 *   - sets them in the environment when the process starts, so children and tools see them;
 *   - answers getenv()/secure_getenv() for those names with the node's values, whatever the
 *     process did to its environment since (CUDA libraries look their limits up this way).
 * Other names are looked up in the environment as usual. Standard C only, no allocation.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CAPS_FILE "/etc/gpuslice/hardcaps.env"
#define MAX_CAPS 32
#define MAX_LINE 256

extern char **environ;

static char caps[MAX_CAPS][MAX_LINE];
static char *values[MAX_CAPS];
static int count = -1;

static void load(void) {
    FILE *file;
    char line[MAX_LINE];
    if (count >= 0) return;
    count = 0;
    file = fopen(CAPS_FILE, "re");
    if (file == NULL) return;
    while (count < MAX_CAPS && fgets(line, sizeof line, file) != NULL) {
        char *eq = strchr(line, '=');
        if (eq == NULL || eq == line) continue;
        line[strcspn(line, "\n")] = '\0';
        strcpy(caps[count], line);
        values[count] = caps[count] + (eq - line) + 1;
        caps[count][eq - line] = '\0';
        count++;
    }
    fclose(file);
}

static const char *cap(const char *name) {
    int i;
    load();
    for (i = 0; i < count; i++) {
        if (strcmp(caps[i], name) == 0) return values[i];
    }
    return NULL;
}

static char *from_environ(const char *name) {
    size_t length = strlen(name);
    char **entry;
    for (entry = environ; entry != NULL && *entry != NULL; entry++) {
        if (strncmp(*entry, name, length) == 0 && (*entry)[length] == '=')
            return *entry + length + 1;
    }
    return NULL;
}

char *getenv(const char *name) {
    const char *value = cap(name);
    return value != NULL ? (char *)value : from_environ(name);
}

char *secure_getenv(const char *name) {
    return getenv(name);
}

__attribute__((constructor)) static void impose(void) {
    int i;
    load();
    for (i = 0; i < count; i++) setenv(caps[i], values[i], 1);
}
