/* The module table: every module of a node, in lifecycle order, and the plug-in kinds.
 * The one list core/node.c walks and the config engine validates against. */
#ifndef AK_MODULES_H
#define AK_MODULES_H

#include "core/module.h"

const ak_schema_t *ak_modules(void);

#endif
