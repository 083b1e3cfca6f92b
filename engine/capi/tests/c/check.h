/* The C API tests' checks: each failed one is printed with kiln's last error and counted;
 * a program prints `ok` and exits 0 when `failures` stays 0. */
#ifndef KILN_TEST_CHECK_H
#define KILN_TEST_CHECK_H

#include "kiln.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

static void check(int holds, const char *what) {
    if (!holds) {
        fprintf(stderr, "FAILED: %s (last error: %s)\n", what, kiln_last_error());
        failures++;
    }
}

static int error_has(const char *text) { return strstr(kiln_last_error(), text) != NULL; }

#endif
