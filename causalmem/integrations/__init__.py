"""Drop-in causalmem backends for agent frameworks (each an optional extra).

* ``causalmem.integrations.langgraph.CausalMemStore`` — a LangGraph ``BaseStore`` (``causalmem-engine[langgraph]``)
* ``causalmem.integrations.mem0.Memory`` / ``AsyncMemory`` — mem0's API on causalmem (``causalmem-engine[mem0]``,
  no mem0 package needed)
* ``causalmem.integrations.autogen.CausalMemory`` — an AutoGen ``autogen_core.memory.Memory``
  (``causalmem-engine[autogen]``)
* ``causalmem.integrations.crewai.CausalMemStorage`` — a CrewAI memory ``StorageBackend`` (needs ``crewai``)

Each also takes the caller's word on what helped, in its framework's terms: ``feedback`` (a reward in
[-1, 1]: the memory ranks higher or lower in the next searches) and ``confirm`` (memories used
together are linked), inside the adapter's scope.

Each module imports its framework only when it is imported itself, so ``import causalmem`` never
needs any of them.
"""
