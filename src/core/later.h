/* The config sections of Ankusa features not built yet (routes): their option rows and the rules that refuse the features
 * themselves. See core/later.c. */
#ifndef AK_CORE_LATER_H
#define AK_CORE_LATER_H

#include "core/module.h"

extern const ak_module_t ak_mod_routes;

#endif
