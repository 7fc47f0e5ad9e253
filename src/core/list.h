/* The intrusive doubly-linked list: a ring of nodes embedded in the structs they link,
 * closed by a sentinel head the owner keeps. ak_list_entry gets the struct back from its
 * node. Owns no memory: it never allocates, frees or locks (whoever holds the structs
 * does, under their own lock). Every operation is O(1) and inline: the dispatcher's rings
 * run through it per claim and per attempt. A node that is in no list has next == NULL
 * (zeroed memory, or after ak_list_remove), so membership is one test. */
#ifndef AK_CORE_LIST_H
#define AK_CORE_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct ak_list {
  struct ak_list *next, *prev;
} ak_list_t;

/* The struct of `type` whose `member` (an ak_list_t) is at ptr (container_of). */
#define ak_list_entry(ptr, type, member) ((type *)(void *)((char *)(ptr) - offsetof(type, member)))

/* Nodes from first to last. Neither the list nor `pos` may change inside the loop, except
 * that the loop may end right after changing it (break). */
#define ak_list_foreach(pos, head) for (ak_list_t *pos = (head)->next; pos != (head); pos = pos->next)
/* The same where the body may remove (or free) `pos` itself. */
#define ak_list_foreach_safe(pos, nx, head) \
  for (ak_list_t *pos = (head)->next, *nx = pos->next; pos != (head); pos = nx, nx = pos->next)

/* A head starts (and an emptied one stays) linked to itself. */
static inline void ak_list_init(ak_list_t *head) { head->next = head->prev = head; }

static inline bool ak_list_empty(const ak_list_t *head) { return head->next == head; }

/* Is this node in some list? */
static inline bool ak_list_linked(const ak_list_t *n) { return n->next != NULL; }

/* The first / last node, NULL when the list is empty. */
static inline ak_list_t *ak_list_first(const ak_list_t *head) { return head->next == head ? NULL : head->next; }
static inline ak_list_t *ak_list_last(const ak_list_t *head) { return head->prev == head ? NULL : head->prev; }

static inline void ak_list_insert_tail(ak_list_t *head, ak_list_t *n) {
  n->next = head;
  n->prev = head->prev;
  n->prev->next = n;
  head->prev = n;
}

static inline void ak_list_insert_head(ak_list_t *head, ak_list_t *n) {
  n->prev = head;
  n->next = head->next;
  n->next->prev = n;
  head->next = n;
}

/* Unlink n from its list (it must be in one); n reads as unlinked afterwards. */
static inline void ak_list_remove(ak_list_t *n) {
  n->prev->next = n->next;
  n->next->prev = n->prev;
  n->next = n->prev = NULL;
}

/* Turn the ring so that n (a node of head's list) is last and the node after it first:
 * round-robin over a list is "serve the first, then rotate after it". The order of the
 * nodes around the ring does not change. */
static inline void ak_list_rotate_after(ak_list_t *head, ak_list_t *n) {
  if (n->next == head) return;
  head->prev->next = head->next;
  head->next->prev = head->prev;
  head->next = n->next;
  head->prev = n;
  n->next->prev = head;
  n->next = head;
}

/* Move every node of from to the end of to, in order; from is left empty. */
static inline void ak_list_move(ak_list_t *from, ak_list_t *to) {
  if (ak_list_empty(from)) return;
  from->next->prev = to->prev;
  to->prev->next = from->next;
  from->prev->next = to;
  to->prev = from->prev;
  ak_list_init(from);
}

#endif
