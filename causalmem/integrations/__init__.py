"""Drop-in causalmem backends for agent frameworks (each an optional extra).

* ``causalmem.integrations.langgraph.CausalMemStore`` — a LangGraph ``BaseStore`` (``causalmem[langgraph]``)
* ``causalmem.integrations.mem0.Memory`` / ``AsyncMemory`` — mem0's API on causalmem (``causalmem[mem0]``,
  no mem0 package needed)
* ``causalmem.integrations.autogen.CausalMemory`` — an AutoGen ``autogen_core.memory.Memory``
  (``causalmem[autogen]``)

Each module imports its framework only when it is imported itself, so ``import causalmem`` never
needs any of them.
"""
