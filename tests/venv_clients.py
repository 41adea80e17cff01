"""Clients that cannot live beside the shared environment's `openai` (3.x), run in a venv of their own by the client
matrix (`matrix.Workers`): `python venv_clients.py` reads `CLIENT CASE URL` lines and answers each with a line
`RESULT {"answer": ..., "cities": [...]}` (or `RESULT {"error": traceback}`), importing each client once.

instructor 1.17 pins `jiter<0.15` where openai 3 needs `jiter>=0.16`, and llama-index-llms-openai 0.8 pins
`openai<3`. Each is set up as its docs say for an OpenAI-compatible server: a base URL and a key.
"""

from __future__ import annotations

import asyncio
import json
import sys
import traceback
from typing import Any

QUESTION = "What's the weather in Tokyo?"
GREETING_PROMPT = "Hello!"
MODEL = "local-model"
cities: list[str] = []


def get_weather(city: str) -> str:
    """Get weather for a city."""
    cities.append(city)
    return json.dumps({"city": city, "temperature_c": 18, "conditions": "light rain"})


def instructor_case(case: str, url: str) -> str:
    """instructor's structured output: the answer is the model it fills, by a call to a tool named as the model is."""
    import instructor
    import openai
    from pydantic import BaseModel, ConfigDict

    class Weather(BaseModel):
        """Get weather for a city"""

        model_config = ConfigDict(title="get_weather")
        city: str

    with openai.OpenAI(base_url=url + "/v1", api_key="sk-test") as sdk:
        client = instructor.from_openai(sdk)
        messages: list[Any] = [{"role": "user", "content": QUESTION}]
        if case == "extract":
            return client.chat.completions.create(model=MODEL, response_model=Weather, messages=messages).city
        partials = list(client.chat.completions.create_partial(model=MODEL, response_model=Weather, messages=messages))
        return partials[-1].city or ""


async def llama_index_case(case: str, url: str) -> str:
    """llama-index's OpenAI-compatible LLM (`OpenAILike`, its docs' way to another server) and its FunctionAgent."""
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.llms import ChatMessage
    from llama_index.llms.openai_like import OpenAILike

    llm = OpenAILike(
        model=MODEL, api_base=url + "/v1", api_key="sk-test", is_chat_model=True, is_function_calling_model=True
    )
    greeting = [ChatMessage(role="user", content=GREETING_PROMPT)]
    if case == "stream":
        return "".join([chunk.delta or "" async for chunk in await llm.astream_chat(greeting)])
    if case == "plain":
        return (await llm.achat(greeting)).message.content or ""
    agent = FunctionAgent(tools=[get_weather], llm=llm, streaming=case == "streamed_loop")
    return str(await agent.run(QUESTION))


def main() -> None:
    for line in sys.stdin:
        client, case, url = line.split()
        cities.clear()
        try:
            answer = instructor_case(case, url) if client == "instructor" else asyncio.run(llama_index_case(case, url))
            result: dict[str, Any] = {"answer": answer, "cities": cities}
        except Exception:
            result = {"error": traceback.format_exc()}
        # A client may print what it likes: the result is the line that starts with RESULT.
        print("RESULT", json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
