"""A real LangGraph graph for the checkpointer tests: `MessagesState`, a scripted model
(no network: its replies depend only on the conversation), a tool node and a human
review that interrupts before the tool runs.

`python tests/langgraph_support.py LOCATION THREAD RESUME` resumes the thread in a
process of its own (the resume-after-interrupt test).
"""

from __future__ import annotations

import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.channels.delta import DeltaChannel
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import Command, interrupt


@tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"Sunny in {city}, 21 C"


def model(state: MessagesState) -> dict[str, Any]:
    """A scripted model: a question gets a tool call, a tool result an answer."""
    messages = state["messages"]
    last = messages[-1]
    turn = sum(1 for m in messages if isinstance(m, AIMessage))
    usage = {"input_tokens": 100 + 10 * len(messages), "output_tokens": 20, "total_tokens": 0}
    usage["total_tokens"] = usage["input_tokens"] + usage["output_tokens"]
    meta = {"model_name": "scripted-1", "model_provider": "scripted"}
    if isinstance(last, HumanMessage):
        city = str(last.content).rstrip("?").split()[-1]
        return {
            "messages": [
                AIMessage(
                    content=f"Let me look up {city}.",
                    tool_calls=[{"name": "weather", "args": {"city": city}, "id": f"call_{turn}"}],
                    usage_metadata=usage,  # type: ignore[arg-type]
                    response_metadata=meta,
                )
            ]
        }
    assert isinstance(last, ToolMessage)
    return {
        "messages": [
            AIMessage(
                content=f"The weather: {last.content}.",
                usage_metadata=usage,  # type: ignore[arg-type]
                response_metadata=meta,
            )
        ]
    }


def review(state: MessagesState) -> Command[Any]:
    """A human approves the tool call (the interrupt) or not."""
    answer = interrupt({"question": "run the tool?", "call": state["messages"][-1].tool_calls})
    if answer == "yes":
        return Command(goto="tools")
    return Command(goto=END, update={"messages": [AIMessage(content="Not looked up.")]})


def route(state: MessagesState) -> str:
    last = state["messages"][-1]
    return "review" if isinstance(last, AIMessage) and last.tool_calls else END


def build(checkpointer: Any) -> Any:
    graph = StateGraph(MessagesState)
    graph.add_node("model", model)
    graph.add_node("review", review)
    graph.add_node("tools", ToolNode([weather]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, ["review", END])
    graph.add_edge("tools", "model")
    return graph.compile(checkpointer=checkpointer)


def add_items(state: list[int], writes: list[list[int]]) -> list[int]:
    return [*state, *(x for w in writes for x in w)]


class Counting(TypedDict):
    """A DeltaChannel (its writes kept, a snapshot every third update) and a counter."""

    items: Annotated[list[int], DeltaChannel(add_items, snapshot_frequency=3)]
    n: int


def delta_graph(checkpointer: Any) -> Any:
    """Eight steps a run, each adding its number to `items`."""

    def step(state: Counting) -> dict[str, Any]:
        return {"items": [state["n"]], "n": state["n"] + 1}

    graph = StateGraph(Counting)
    graph.add_node("step", step)
    graph.add_edge(START, "step")
    graph.add_conditional_edges("step", lambda s: END if s["n"] % 8 == 0 else "step", ["step", END])
    return graph.compile(checkpointer=checkpointer)


def config(thread_id: str) -> dict[str, Any]:
    return {"configurable": {"thread_id": thread_id}}


def shape(message: BaseMessage) -> tuple[Any, ...]:
    """A message without its random id."""
    calls = tuple(
        (c["name"], tuple(sorted(c["args"].items()))) for c in getattr(message, "tool_calls", [])
    )
    return (message.type, message.content, calls)


def history_shape(graph: Any, thread_id: str) -> list[tuple[Any, ...]]:
    """`get_state_history` without ids and times: what two savers must agree on."""
    rows = []
    for snapshot in graph.get_state_history(config(thread_id)):
        rows.append(
            (
                tuple(shape(m) for m in snapshot.values.get("messages", [])),
                snapshot.next,
                snapshot.metadata.get("step"),
                snapshot.metadata.get("source"),
                tuple(sorted(snapshot.metadata.get("writes") or {})),
                tuple(len(t.interrupts) for t in snapshot.tasks),
            )
        )
    return rows


if __name__ == "__main__":
    from sessiontree.integrations.langgraph import SessionTreeSaver

    location, thread_id, answer = sys.argv[1:4]
    with SessionTreeSaver(location) as saver:
        result = build(saver).invoke(Command(resume=answer), config(thread_id))
        print(result["messages"][-1].content)
