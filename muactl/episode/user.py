"""User simulators: litellm (any provider or local server), hf (a local model), scripted (from the task).

All three see the same thing: the user's goal, and the conversation with roles flipped (the agent's
messages are "user" to the simulator). The agent's tool calls and tool results are hidden. A
simulator ends the conversation with ###STOP### (goal met or abandoned), ###TRANSFER### (handed to a
human) or ###OUT-OF-SCOPE### (the agent asks for something the goal does not cover).
"""

from __future__ import annotations

import random
import re
import zlib
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..compile.prompt import user_system_prompt as user_prompt_of
from .fidelity import reply_breaks
from .transcript import handed_over, shown_to_user

if TYPE_CHECKING:
    from .types import EpisodeContext

STOP, TRANSFER, OUT_OF_SCOPE = "###STOP###", "###TRANSFER###", "###OUT-OF-SCOPE###"
# the user's ###TRANSFER### is `user_transfer`: only the agent's transfer tool call ends as `transfer`
STOP_TOKENS = {STOP: "user_stop", TRANSFER: "user_transfer", OUT_OF_SCOPE: "out_of_scope"}

def user_system_prompt(ctx: EpisodeContext) -> str:
    return user_prompt_of(ctx.domain.spec, ctx.task.task)


def flipped_history(ctx: EpisodeContext) -> list[dict[str, str]]:
    """The conversation as the simulator sees it: agent text as "user", its own as "assistant", no tools."""
    return flipped(ctx.messages)


def flipped(messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """flipped_history of a list of messages."""
    out = []
    for m in messages:
        if shown_to_user(m):
            out.append({"role": "user", "content": m["content"]})
        elif m["role"] == "user":
            out.append({"role": "assistant", "content": m["content"]})
    return out


@dataclass
class UserReply:
    content: str
    stop: str | None = None  # a termination reason when the simulator ended the conversation
    usage: dict[str, float] = field(default_factory=dict)


def split_stop(text: str, phrases: list[str] = ()) -> UserReply:
    """The reply and the ending it asks for: a stop token, or one of the domain's `user_stop` phrases."""
    for token, reason in [*STOP_TOKENS.items(), *((p, "user_stop") for p in phrases)]:
        if token in text:
            return UserReply(text.replace(token, "").strip(), reason)
    return UserReply(text.strip())


class UserSimulator(ABC):
    name = "user"

    @abstractmethod
    async def respond(self, ctx: EpisodeContext) -> UserReply: ...

    def describe(self) -> dict[str, Any]:
        return {"user": self.name}


# ---------------------------------------------------------------- scripted


# The task speaks to the user ("You want to cancel your order"); the user says it as "I want to cancel my
# order". "you" is "I" as a subject and "me" as an object, told apart by the words around it; the be-verbs
# agree ("you are" -> "I am", "are you" -> "am I").
_BE = [(r"\byou are\b", "I am"), (r"\byou were\b", "I was"), (r"\byou aren't\b", "I'm not"),
       (r"\byou weren't\b", "I wasn't"), (r"\baren't you\b", "aren't I"), (r"\bweren't you\b", "wasn't I"),
       (r"\bare you\b", "am I"), (r"\bwere you\b", "was I")]
_FORMS = [(r"\byou're\b", "I'm"), (r"\byou've\b", "I've"), (r"\byou'll\b", "I'll"), (r"\byou'd\b", "I'd"),
          (r"\byourselves\b", "ourselves"), (r"\byourself\b", "myself"), (r"\byours\b", "mine"), (r"\byour\b", "my")]
_AUX = set("do does did don't doesn't didn't can could can't couldn't will would won't wouldn't shall should "
           "shouldn't may might must have has had haven't hasn't hadn't".split())
# a verb before "you" that takes it as its object ("told you", "help you wait")
_TAKES_OBJECT = set("tell tells told give gives gave send sends sent ask asks asked call calls thank thanks show shows "
                    "offer offers pay pays owe owes let lets make makes made help helps get gets got see sees saw meet "
                    "meets met hear hears heard want wants need needs expect expects remind reminds bill bills charge "
                    "charges refund refunds contact contacts email emails text texts allow allows advise advises "
                    "inform informs notify notifies assure assures promise promises suit suits keep keeps put puts "
                    "transfer transfers pass passes connect connects sell sells sold bring brings brought "
                    "cost costs".split())
_PREPOSITIONS = set("to for with at from about of by on in into onto upon without within behind toward towards "
                    "against between among around near beside past via than like unlike except".split())
# after "you", a word that makes it the subject ("you want", "you already ...", "you no longer ...")
_FOLLOWS_SUBJECT = _AUX | set("want wanted wants need needed know knew think thought feel felt see saw hope wish "
                              "like liked prefer preferred remember forgot forget ask insist insisted agree "
                              "decline accept refuse mean meant go went get got buy bought pay paid spend spent "
                              "send sent give gave take took keep kept leave left lose lost find found sell sold "
                              "say said tell told come came become became make made put set hold held hear heard "
                              "use own live moved order plan expect am cannot also already only still just never "
                              "always no not now then really recently once usually often".split())
_OBJECT_BEFORE = set("the a an my his her its our their this these those some any every each that back".split())


def _cased(word: str, repl: str) -> str:
    return repl if repl.startswith("I") or not word[0].isupper() else repl[0].upper() + repl[1:]


def _you_is_subject(before: str, after: str) -> bool:
    prev = re.findall(r"[\w'#]+|[^\w\s]", before)
    nxt = re.findall(r"[\w'#]+|[^\w\s]", after)
    p = prev[-1].lower() if prev and (prev[-1][0].isalnum() or prev[-1][0] == "#") else ""
    n = nxt[0].lower() if nxt else ""
    if p in _AUX:  # "do you", "can you"
        return True
    if p in _TAKES_OBJECT:  # "help you", "let you know"
        return False
    if n in _FOLLOWS_SUBJECT or (n.endswith("ed") and len(n) > 3):  # "than you have", "the item you ordered"
        return True
    # "to you", "charged you twice", "sent you the", "with you."
    return not (p in _PREPOSITIONS or p.endswith("ed") or n in _OBJECT_BEFORE or n in {"", *".,!?;:)\"'"})


def first_person(text: str) -> str:
    """Turn a task's second-person goal ("You want to cancel your order") into the user's words."""
    out = " ".join(text.split())
    for pattern, repl in _BE + _FORMS:
        out = re.sub(pattern, lambda m, r=repl: _cased(m.group(0), r), out, flags=re.I)

    def you(m: re.Match) -> str:
        # a few words either side decide it (a bounded look, however long the goal)
        subject = _you_is_subject(m.string[max(0, m.start() - 60): m.start()], m.string[m.end(): m.end() + 60])
        return "I" if subject else _cased(m.group(0), "me")

    out = re.sub(r"(?<!\bthank )\byou\b", you, out, flags=re.I)  # "thank you" is a set phrase
    return out[:1].upper() + out[1:]


_CONFIRM = re.compile(r"\b(confirm|proceed|shall i|should i|do you want me|would you like me|go ahead|is that (right|correct|ok))\b|\(yes/no\)", re.I)
# "Anything else?" after an answer or a refusal offers to end the conversation; it asks for nothing
_CLOSING = re.compile(r"(?:\b(?:is there|was there|do you have|can i help(?: you)?(?: with)?|could i help(?: you)?(?: with)?|"
                      r"may i help(?: you)?(?: with)?)\s+)?\banything else\b[^.!?]*\?|\bhow else can i (?:help|assist)\b[^.!?]*\?",
                      re.I)
_ASK = re.compile(r"\?|\b(please (provide|share|tell|give)|could you|can you|may i have|what is your|let me know)\b", re.I)


# `scripted:varied`: each situation's phrasings, the plain scripted user's first. Every one keeps what the oracle
# and the fidelity checks key on: a yes has no "no" in it and a no has one (oracle.consent_in), nothing reads like
# the agent (fidelity._AGENT_TALK), and the goal and the facts are said whole (stated_goal, gave_facts).
USER_PHRASES: dict[str, tuple[str, ...]] = {
    "open": ("{goal}", "Hi. {goal}", "Hello. {goal}", "{goal} Can you sort that out for me?", "Good morning. {goal}",
             "Hi there! {goal} Thanks.", "{goal} Is that possible?", "Hey, quick one: {goal}", "Hello! {goal} Thank you.",
             "Good afternoon. {goal} Could you do that?", "Hi, I'm writing because of this. {goal}", "{goal} Thanks in advance.",
             "Good evening. {goal}", "Hi, hope you're well. {goal}", "Hello, I have a request. {goal}",
             "{goal} Could you help me with that?", "Morning! {goal}", "Hi again. {goal}", "Hello there. {goal}",
             "Right, so: {goal}", "{goal} Hope you can help.", "Hi! I need a hand with something. {goal}",
             "{goal} What do you need from me?", "Hello, thanks for picking this up. {goal}",
             "Hi, I've got a question about my account. {goal}", "{goal} Cheers.", "Evening. {goal}",
             "Hi, first time using this chat. {goal}", "So, here's the thing. {goal}", "{goal} Many thanks.",
             "Hello, can I ask for some help? {goal}", "Hi, it's about something I need done. {goal}",
             "{goal} Let me know what you need.", "Hey there. {goal}", "Hi, could you help? {goal}",
             "Hello. I'll keep it short. {goal}"),
    "facts": ("{facts}", "Sure. {facts}", "Of course: {facts}", "Here you go. {facts}", "{facts} Hope that helps.",
              "Okay. {facts}", "Right. {facts}", "{facts} Is that enough?", "Certainly. {facts}",
              "Sure thing. {facts}", "Yes, of course. {facts}", "{facts} Anything else you need?", "Here it is: {facts}",
              "No problem. {facts}", "Alright. {facts}", "{facts} Let me know if that works.", "Got it. {facts}",
              "Happy to. {facts}", "{facts} That should do it.", "Sure, here. {facts}", "Absolutely: {facts}"),
    "yes": ("Yes, please go ahead.", "Yes, go ahead.", "Yes please, do it.", "Sure, go ahead.",
            "Okay, yes, please proceed.", "Yes, that's right, go ahead.", "Yes. Please do.", "Yep, go for it.",
            "Yes, that's correct. Please go ahead.", "Sure, please do.", "Okay, do it.", "Yes, sounds good, go ahead.",
            "Yeah, go ahead with that.", "Yes, exactly, please proceed.", "Okay, that's correct, do it.",
            "Yes, let's do that.", "Sure thing, go ahead.", "Yes, that's what I want. Please do.",
            "Yep, that's correct.", "Okay, please go ahead with it."),
    "no": ("No, please do not make that change.", "No, don't do that.", "No thanks, I'd rather not.",
           "No. Please leave it as it is.", "Actually, no. Do not change anything.",
           "No, I've changed my mind. Leave it.", "No, I'd like to keep things as they are.", "No, not now, thanks.",
           "No, I've decided against it.", "Hmm, no. Please don't go ahead.", "No, let's not do that."),
    "unknown": ("I don't know that, sorry.", "Sorry, I don't have that.", "I'm afraid I don't know.",
                "I don't know, sorry.", "No idea, sorry.", "I'm not sure, I don't have it here.",
                "Sorry, I don't know that one.", "I don't have that to hand, sorry.", "I'm afraid I can't tell you that."),
    "thanks": ("Thank you, that's all.", "Thanks, that's everything.", "Great, thank you. Bye!",
               "Perfect, thanks for your help.", "That's all I needed, thanks.", "Wonderful, thank you so much.",
               "Thanks a lot, bye.",
               "Brilliant, cheers.", "Great, that's sorted then. Thanks.", "Thanks, have a good day.",
               "Lovely, that's all for today.", "Excellent, many thanks.", "Cheers, that's everything I wanted.",
               "Thanks, you've been a great help.", "Super, thank you. Goodbye.", "All good, thanks a lot.",
               "Thank you, have a nice evening.", "Great stuff, thanks.", "That's it from me, thank you.",
               "Fantastic, thanks again.", "Many thanks, take care."),
}
# `scripted:varied` also speaks in the manner of the task's persona (the built-in domains' persona names; any other
# persona, or none, draws one of these per episode): more phrasings per situation, and a sentence of its own
# around the goal ("aside", said before or after it). The same rules as USER_PHRASES hold for every line.
PERSONA_PHRASES: dict[str, dict[str, tuple[str, ...]]] = {
    "polite": {
        "aside": ("I hope you are having a good day.", "Thank you for taking the time.", "Sorry to trouble you.",
                  "I appreciate your help with this.", "I hope this is the right place to ask.",
                  "Many thanks for looking into it.", "I hope it's not too much bother.",
                  "It's kind of you to help.", "I hope I'm explaining this well.", "Thanks in advance for your patience.",
                  "I really appreciate it.", "I hope that makes sense.", "Apologies if this is a silly question.",
                  "Thank you for being so helpful.", "I'd be grateful for your help.", "I hope your day is going well.",
                  "Sorry for the bother.", "Thank you ever so much.", "I'm grateful for any help.",
                  "I'll try to be clear.", "Kind regards."),
        "facts": ("Of course, happy to. {facts}", "Certainly, here are my details. {facts}", "{facts} Thank you kindly.",
                  "Absolutely. {facts} Let me know if you need more."),
        "yes": ("Yes, please, that would be lovely.", "Yes, thank you, please go ahead.", "That sounds right. Yes, please."),
        "thanks": ("Thank you so much, you've been very helpful.", "That's everything, thank you kindly. Goodbye.",
                   "Lovely, thanks a lot for your patience. Bye."),
    },
    "brief": {
        "aside": ("In a rush.", "Quick one.", "Short on time.", "Busy day, sorry.",
"Need this fast.", "Keeping it short.", "Between meetings.", "Five minutes, tops.", "Straight to it.",
                  "No time to chat.", "Quick, please.", "Running late."),
        "facts": ("{facts}", "Here. {facts}", "{facts} That's it."),
        "yes": ("Yes.", "Yes, do it.", "Go ahead.", "Ok, go."),
        "thanks": ("Thanks.", "Ok, thanks. Bye.", "Great. Done."),
    },
    "anxious": {
        "aside": ("I'm a bit worried about this.", "Sorry, I'm nervous about getting this right.",
                  "This has been stressing me out.", "I really hope this can be fixed.",
                  "I keep worrying about my money.", "Please be careful with it.",
                  "I hope I haven't messed something up.", "I couldn't sleep over this.", "I'm worried it's too late.",
                  "I hope this won't cause trouble.", "I get nervous with these things.", "I really want to get it right.",
                  "I hope nothing goes wrong.", "This is making me uneasy.", "I'd hate for anything to get lost.",
                  "I'm a bit out of my depth here.", "Sorry, I'm a little flustered.", "I just want to be sure."),
        "facts": ("Okay, here goes. {facts}", "{facts} I hope that's right.", "{facts} Is that all you need?"),
        "yes": ("Yes, okay. Please go ahead, carefully.", "Yes, I think so. Please proceed.",
                "Okay, yes, if that's right then go ahead."),
        "thanks": ("Oh good, thank you, that's a relief.", "Thank you, I feel much better now.",
                   "Phew, thanks. That's all."),
    },
    "insistent": {
        "aside": ("I've been a customer for years.", "I'd like this sorted today.", "I know exactly what I want.",
                  "This really matters to me.", "I've asked about this before.",
                  "I expect this done properly.", "Let's not waste time.", "I'd like a straight answer.",
                  "I want this handled now.", "I've been patient so far.", "I know how this should work.",
                  "I don't want to be passed around.", "Please just do what I ask.", "I've done this many times before.",
                  "This should be simple."),
        "facts": ("{facts} Now can we get on with it?", "Fine. {facts}", "Here, {facts}"),
        "yes": ("Yes, that's what I asked for. Go ahead.", "Yes. Do it now, please.", "Obviously yes, go ahead."),
        "thanks": ("Good. That's all.", "Finally. Thanks.", "Right, thank you. Bye."),
    },
}
# where the user is coming from, any persona: said with the persona's aside, in either order
_CONTEXTS = ("I'm on my lunch break.", "I just got home from work.", "My partner asked me to sort this out.",
             "I only noticed this today.", "I've been meaning to do this for a while.", "I'm on my phone, sorry.",
             "A friend said you could help.", "I'm travelling this week.", "I tried the website first.",
             "It's my first time contacting you.", "I'm doing some admin this evening.", "Hope this is quick.",
             "I'm at work right now.", "I'm sorting things out before the weekend.", "My sister suggested I get in touch.",
             "I'm on the train.", "I've just woken up.", "I'm catching up on chores.", "I'm at the kitchen table.",
             "I've been putting this off.", "The app wasn't working for me.", "I read the help page first.",
             "I'm writing from my laptop.", "I'm on a break.", "It's been on my list for days.",
             "I'm helping out a neighbour with theirs as well.", "I just got back from holiday.", "I'm in a cafe.",
             "My phone battery is low.", "I have a few minutes now.", "I'm tidying up my accounts.",
             "I saw the email earlier.", "I'm planning ahead.", "I've just finished dinner.", "It's been a long week.",
             "I'm at the library.")
# how the goal's "I want ..." may begin instead (want and need are no content words of stated_goal's)
_GOAL_LEADS = ("I want", "I'd like", "I would like", "I need", "I really want", "What I want is", "I'm hoping",
               "I'd really like", "I was hoping")
# a fact sentence "My email is x@y.z." said another way (the value verbatim, so gave_facts still finds it)
_FACT_FORMS = ("My {key} is {value}.", "{value} is my {key}.", "My {key}: {value}.", "The {key} is {value}.",
               "It's {value}, my {key}.", "For my {key}, {value}.", "{Key}: {value}.", "You'll have my {key} as {value}.")
# other ways to say a whole goal (retail's: its goals are long sentences of the template's, where swapping a few
# words leaves most of each sentence as it was), each drawn per episode before the rewordings below, which then
# apply to what was drawn. Each keeps the goal's numbers and most of its content words (stated_goal); the first
# of each is the goal as the task says it, and a one-way entry mends a template's grammar ("no longer needed").
_ORDER = r"(?P<order>#W\d+)"
_RESTATEMENTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"\bbecause I no longer needed\.", ("because it is no longer needed.",)),
    (r"\bbecause I ordered by mistake\.", ("because I ordered it by mistake.",)),
    (rf"^I want to cancel my order {_ORDER} because (?P<why>[^.]+)\.",
     (r"\g<0>", r"Please cancel my order \g<order>, because \g<why>.",
      r"Can you cancel my order \g<order>? I ask because \g<why>.",
      r"I have to cancel my order \g<order> because \g<why>.",
      r"I want to cancel an order, \g<order>, because \g<why>.",
      r"My order \g<order>: I want to cancel it, because \g<why>.",
      r"Order \g<order>, please: cancel it, because \g<why>.",
      r"I'd like you to cancel my order \g<order>, because \g<why>.",
      r"About my order \g<order>: please cancel it, because \g<why>.")),
    (rf"^I am moving and want my pending order {_ORDER} shipped to my new address: (?P<to>[^:]+?)\. ",
     (r"\g<0>", r"I am moving, so please ship my pending order \g<order> to my new address: \g<to>. ",
      r"Could my pending order \g<order> be shipped to my new address instead? It is \g<to>. I am moving. ",
      r"Please send my pending order \g<order> to my new address, \g<to>, because I am moving. ",
      r"My new address is \g<to>, since I am moving. I want my pending order \g<order> shipped there. ",
      r"I am moving house. The new address for my pending order \g<order> is \g<to>; it should be shipped there. ",
      r"Since I am moving, my pending order \g<order> needs to be shipped to my new address: \g<to>. ",
      r"Please update the address on my pending order \g<order>: I am moving, and it should be shipped to \g<to>. ",
      r"I am moving soon. Can my pending order \g<order> be shipped to my new address, \g<to>? ")),
    (rf"^I want to pay my pending order {_ORDER} with my gift card instead of the current payment method\.",
     (r"\g<0>", r"Please switch the payment of my pending order \g<order> to my gift card instead of the current "
      r"payment method.",
      r"Can I pay for my pending order \g<order> with my gift card instead of the current payment method?",
      r"For my pending order \g<order>, I want to pay with my gift card, not the current payment method.",
      r"I'd rather pay my pending order \g<order> with my gift card instead of the current payment method.",
      r"My gift card should pay for my pending order \g<order>, instead of the current payment method.",
      r"I'd like to use my gift card to pay my pending order \g<order>, instead of the current payment method.",
      r"Is it possible to pay my pending order \g<order> with my gift card instead of the current payment method?",
      r"Please charge my gift card for my pending order \g<order>, instead of the current payment method.")),
    (rf"^I received order {_ORDER} but want to return the (?P<item>.+?) only; keep the rest\.",
     (r"\g<0>", r"I want to return the \g<item> from order \g<order>, which I received, and keep the rest.",
      r"Order \g<order> arrived, but I want to return the \g<item> only; keep the rest.",
      r"I received order \g<order>. Only the \g<item> should go back: I want to return it and keep the rest.",
      r"Could I return the \g<item> from order \g<order>? I received it, but I only want to return that one; "
      r"keep the rest.",
      r"From order \g<order>, which I received, I want to return just the \g<item>; keep the rest.",
      r"I've received order \g<order>, and I want to return the \g<item> only; keep the rest.",
      r"Please help me return the \g<item> from order \g<order>, which I received; keep the rest.",
      r"The \g<item> from order \g<order> has to go back. I received the order and want to return only that; keep "
      r"the rest.")),
    (r"\bThe refund should go back to the original payment method\.",
     (r"\g<0>", "Please put the refund on the original payment method.",
      "Refund it to the original payment method, please.", "I'd like the refund on the original payment method.",
      "The money should go back to the original payment method.")),
    (rf"^The (?P<item>.+?) from my delivered order {_ORDER} does not suit me; I want to exchange it for the same "
     r"product with (?P<new>.+?)\. ",
     (r"\g<0>", r"I want to exchange the \g<item> from my delivered order \g<order>, as it does not suit me, for the "
      r"same product with \g<new>. ",
      r"The \g<item> in my delivered order \g<order> does not suit me, so I want to exchange it for the same product "
      r"with \g<new>. ",
      r"Could I exchange the \g<item> from my delivered order \g<order> for the same product with \g<new>? It does "
      r"not suit me. ",
      r"My delivered order \g<order> came with the \g<item>, which does not suit me. I want to exchange it for the "
      r"same product with \g<new>. ",
      r"Please exchange the \g<item> from my delivered order \g<order> for the same product with \g<new>; the one "
      r"I have does not suit me. ",
      r"I am not happy with the \g<item> from my delivered order \g<order>: it does not suit me. I want to exchange "
      r"it for the same product with \g<new>. ")),
    (r"\bSettle any difference with the order's original payment method\.",
     (r"\g<0>", "Any difference goes on the order's original payment method.",
      "Use the order's original payment method for any difference.",
      "Please settle the difference with the original payment method of the order.",
      "Whatever the difference, put it on the order's original payment method.")),
    (rf"^In my pending order {_ORDER} I ordered the (?P<item>.+?) but want it with (?P<new>.+?) instead\. ",
     (r"\g<0>", r"I ordered the \g<item> in my pending order \g<order> but want it with \g<new> instead. ",
      r"Could you change the \g<item> in my pending order \g<order> to \g<new> instead? ",
      r"My pending order \g<order> has the \g<item>, but I want it with \g<new> instead. ",
      r"I want the \g<item> I ordered in my pending order \g<order> with \g<new> instead. ",
      r"About my pending order \g<order>: I ordered the \g<item>, but I want it with \g<new> instead. ",
      r"Please switch the \g<item> in my pending order \g<order>: I want it with \g<new> instead. ",
      r"I made a mistake in my pending order \g<order>. I ordered the \g<item> but want it with \g<new> instead. ")),
    (r"\bAny price difference should go to the order's current payment method\.",
     (r"\g<0>", "Put any price difference on the order's current payment method.",
      "The order's current payment method can cover any price difference.",
      "Charge or refund the price difference on the current payment method of the order.",
      "Use the order's current payment method for the price difference.")),
    (rf"^I want to know the status of my order {_ORDER} and its tracking number\.",
     (r"\g<0>", r"Could you let me know the status of my order \g<order> and its tracking number?",
      r"I'm checking on my order \g<order>: I want to know its status and its tracking number.",
      r"Where is my order \g<order>? I want to know its status and the tracking number.",
      r"Please tell me the order status and the tracking number for my order \g<order>. I want to know where it is.",
      r"My order \g<order>: I want to know its status, and I need its tracking number too.",
      r"Has my order \g<order> shipped? I want to know its status and the tracking number.",
      r"I'd like an update on my order \g<order>: I want to know the status, and its tracking number please.")),
    (r"^I want to change the email address on my account to a new one, because I no longer use the old one\.",
     (r"\g<0>", "I need a new email address on my account, because I no longer use the old one.",
      "Please change the email address on my account to a new one; I no longer use the old one.",
      "The email address on my account is out of date: I no longer use the old one, so I want to change it to a "
      "new one.",
      "Could you change the email address on my account to a new one? I no longer use the old one.",
      "I no longer use the old email address on my account, so I want to change it to a new one.",
      "My account still has the old email address, which I no longer use. I want to change it to a new one.",
      "I want my account's email address changed to a new one, because I no longer use the old one.")),
    (rf"^I am thinking of exchanging the (?P<item>.+?) from my delivered order {_ORDER} for the same product with "
     r"(?P<new>.+?), and want to know what the price difference would be\.",
     (r"\g<0>", r"What would the price difference be if I exchanged the \g<item> from my delivered order \g<order> "
      r"for the same product with \g<new>? I am thinking of exchanging it.",
      r"I am considering exchanging the \g<item> from my delivered order \g<order> for the same product with "
      r"\g<new>, and I want to know what the price difference would be first.",
      r"Before I decide anything: I am thinking of exchanging the \g<item> from my delivered order \g<order> for "
      r"the same product with \g<new>. What would the price difference be?",
      r"I want to know the price difference first: I am thinking of exchanging the \g<item> from my delivered "
      r"order \g<order> for the same product with \g<new>.",
      r"Just a question for now: I am thinking of exchanging the \g<item> from my delivered order \g<order> for "
      r"the same product with \g<new>. What would the price difference be?",
      r"How much would the price difference be if I exchanged the \g<item> from my delivered order \g<order> for "
      r"the same product with \g<new>? I am only thinking of it.")),
)
# other words for common parts of a goal, each drawn per episode (the first: as the task says it). They leave
# numbers, ids and most content words alone, so stated_goal still finds the goal in what was said.
_REWORDINGS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (r"\bmove\b", ("move", "transfer", "shift")),
    (r"\bbecause\b", ("because", "since", "as")),
    (r"\bdo not\b", ("do not", "don't")),
    (r"\bdoes not\b", ("does not", "doesn't")),
    (r"\bI am\b", ("I am", "I'm")),
    (r"\bI think\b", ("I think", "I believe", "As far as I know,")),
    (r"\bsuit me\b", ("suit me", "work for me", "fit me")),
    (r"\bexchange\b", ("exchange", "swap")),
    (r"\bexchanging\b", ("exchanging", "swapping")),
    (r"\bhow much money is in\b", ("how much money is in", "what the balance is on", "how much I have in")),
    (r"\bno longer need\b", ("no longer need", "don't need")),
    (r"\bno longer use\b", ("no longer use", "don't use")),
    (r"\bI received\b", ("I received", "I got")),
    (r"\bthe status of\b", ("the status of", "what is happening with")),
    (r"\bshipped to\b", ("shipped to", "sent to", "delivered to")),
    (r"\ball the money in\b", ("all the money in", "everything in", "the whole balance of")),
    (r"\bwant to know\b", ("want to know", "would like to know", "need to know")),
    (r"\bthinking of\b", ("thinking of", "considering")),
    (r"\binstead of\b", ("instead of", "rather than")),
    # retail's goals (appended, so the draws above stay as they were for every earlier goal)
    (r"\bpending order\b", ("pending order", "unshipped order", "open order")),
    (r"\bdelivered order\b", ("delivered order", "already delivered order", "recently delivered order")),
    (r"\bmy new address\b", ("my new address", "the new address", "my new home address")),
    (r"\bkeep the rest\b", ("keep the rest", "I'm keeping everything else", "the other items stay with me")),
    (r"\bThe refund should go back to\b", ("The refund should go back to", "Please refund it to",
                                          "I'd like the money back on")),
    (r"\boriginal payment method\b", ("original payment method", "payment method I paid with")),
    (r"\bcurrent payment method\b", ("current payment method", "payment method it uses now")),
    (r"\bprice difference\b", ("price difference", "difference in price")),
    (r"\baccept any other solution\b", ("accept any other solution", "accept anything else as a solution",
                                        "accept another solution", "accept any alternative solution",
                                        "accept a different solution")),
    (r"\bthe same product with\b", ("the same product with", "the same item but with", "one of the same kind with")),
    (r"\btracking number\b", ("tracking number", "tracking code", "tracking details")),
    (r"\bchange the email address on my account to a new one\b", ("change the email address on my account to a new one",
                                                                   "update the email address on my account to a new one",
                                                                   "put a new email address on my account")),
    (r"\bthe old one\b", ("the old one", "my old one", "the old address")),
    (r"\bI(?: am|'m) moving\b", ("I am moving", "I'm moving house", "I've just moved")),
    (r"\bSettle any difference with\b", ("Settle any difference with", "Charge or refund any difference on")),
    (r"\bbut want it with\b", ("but want it with", "but would prefer it with", "but now want it with")),
    (r"\bI ordered\b", ("I ordered", "I bought", "I picked")),
    (r"\bwith my gift card\b", ("with my gift card", "using my gift card")),
    (r"\bI do(?: not|n't) want to change anything else\b", ("I do not want to change anything else",
                                                             "Nothing else should change",
                                                             "Everything else stays the same",
                                                             "Please leave everything else as it is",
                                                             "The rest of the order stays as it is")),
)
# other names for a fact's key (retail's; a key not named here, such as bank's "name", is said as it is)
_FACT_KEYS = {"email": ("email", "email address", "e-mail", "account email", "email on file")}
# ... and more ways to give that fact (after _FACT_FORMS' own, so other keys draw as they did)
_KEY_FORMS = {"email": ("I use {value} as my {key}.", "You can find me under {value}, my {key}.",
                        "Look me up by my {key}, {value}.", "My account is under the {key} {value}.",
                        "I signed up with {value}.", "The account uses {value} as its {key}.")}
_MY_FACT = re.compile(r"^My ([a-z]+(?: [a-z]+)?) is (\S.*?)\.?$")


def persona_phrasings(persona: str | None, situation: str) -> tuple[str, ...]:
    """A situation's phrasings for `scripted:varied` in the manner of `persona`: USER_PHRASES' and, for a persona
    PERSONA_PHRASES knows, its own."""
    return USER_PHRASES[situation] + PERSONA_PHRASES.get(persona or "", {}).get(situation, ())


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.!?])\s+", text.strip()) if s.strip()]


class ScriptedUser(UserSimulator):
    """Deterministic, driven by the task file: states the goal, gives the known facts when asked,
    answers confirmations as the task says (user.consent), makes the gold path's user-side calls when the
    agent names them, and stops when the agent no longer asks anything (a closing "Anything else?" asks
    nothing; with ###TRANSFER### once the agent handed it over, see `stop`). For tests, cheap debugging and CPU training; it does not change its mind or wander like an
    LLM user. `varied` (`scripted:varied`): the same behaviour said several ways, drawn from the episode's
    seed (as oracle:varied does for the agent): each situation's phrasing (USER_PHRASES, and more in the manner
    of the task's persona, PERSONA_PHRASES, with an aside of its own around the goal), and the known facts in
    another order and wording, so that data from it does not say each thing one way."""

    name = "scripted"

    def __init__(self, varied: bool = False):
        self.varied = varied
        if varied:
            self.name = "scripted:varied"

    def _pick(self, ctx: EpisodeContext, key: str, options) -> str:
        """The first option, or with `varied` one drawn from the episode's seed and `key` (replayed: the same)."""
        return options[random.Random(f"{ctx.seed}:user:{key}").randrange(len(options))] if self.varied else options[0]

    def persona(self, ctx: EpisodeContext) -> str:
        """The manner it speaks in (varied only): the task's persona when PERSONA_PHRASES knows it, else one drawn."""
        name = ctx.task.task.persona or ""
        return name if name in PERSONA_PHRASES else self._pick(ctx, "persona", sorted(PERSONA_PHRASES))

    def phrasings(self, ctx: EpisodeContext, situation: str) -> tuple[str, ...]:
        return persona_phrasings(self.persona(ctx), situation) if self.varied else USER_PHRASES[situation]

    def say(self, ctx: EpisodeContext, situation: str, **fields: str) -> str:
        return self._pick(ctx, f"{situation}:{len(ctx.messages)}", self.phrasings(ctx, situation)).format(**fields)

    def goal(self, ctx: EpisodeContext, reason: str) -> str:
        """The goal in the user's words; varied: the whole goal said another way where _RESTATEMENTS knows it, then
        common parts of it reworded, its leading "I want to" said another way, and the persona's aside before it,
        after it or not at all."""
        plain = first_person(reason)
        if not self.varied:
            return plain
        for k, (pattern, ways) in enumerate(_RESTATEMENTS):
            plain = re.sub(pattern, self._pick(ctx, f"restate:{k}", ways), plain)
        for k, (pattern, words) in enumerate(_REWORDINGS):
            plain = re.sub(pattern, self._pick(ctx, f"reword:{k}", words), plain)
        if plain.startswith("I want to "):
            plain = self._pick(ctx, "goal-lead", _GOAL_LEADS) + plain[len("I want"):]
        aside = self._pick(ctx, "aside", PERSONA_PHRASES[self.persona(ctx)]["aside"])
        context = self._pick(ctx, "context", _CONTEXTS)
        aside = self._pick(ctx, "context-at", (aside, f"{context} {aside}", f"{aside} {context}"))
        return self._pick(ctx, "aside-at", (f"{aside} {plain}", f"{plain} {aside}", plain))

    def facts(self, ctx: EpisodeContext, known: str) -> str:
        """The known facts in the user's words; varied: in an order and a wording drawn once per episode."""
        plain = first_person(known)
        if not self.varied:
            return plain
        rng = random.Random(f"{ctx.seed}:user:facts")
        parts = _sentences(plain)
        rng.shuffle(parts)
        worded = []
        for part in parts:
            m = _MY_FACT.match(part)
            if not m:
                worded.append(part)
                continue
            key = m.group(1)
            form = rng.choice(_FACT_FORMS + _KEY_FORMS.get(key, ()))
            key = self._pick(ctx, "fact-key", _FACT_KEYS[key]) if key in _FACT_KEYS else key
            worded.append(form.format(key=key, Key=key[:1].upper() + key[1:], value=m.group(2)))
        said = " ".join(worded)
        return self._pick(ctx, "facts-frame", self.phrasings(ctx, "facts")).format(facts=said)

    async def respond(self, ctx: EpisodeContext) -> UserReply:
        goal = ctx.task.task.user
        said = [m["content"] for m in ctx.messages if m["role"] == "user"]
        agent_msgs = [m for m in ctx.messages if m["role"] == "assistant" and not m.get("tool_calls")]
        last = (agent_msgs[-1].get("content") or "") if agent_msgs else ""
        last = _CLOSING.sub("", last)
        if not said:
            return UserReply(self.say(ctx, "open", goal=self.goal(ctx, goal.reason)))
        done = await self._user_side_call(ctx, last)
        if done is not None:
            return UserReply(done)
        if _CONFIRM.search(last):
            return UserReply(self.say(ctx, "yes" if goal.consent else "no"))
        if _ASK.search(last):
            known = self.facts(ctx, goal.known) if goal.known else ""
            if known and known not in said:
                return UserReply(known)
            if sum(s in USER_PHRASES["unknown"] for s in said) < 2:
                return UserReply(self.say(ctx, "unknown"))
            return UserReply("", self.stop(ctx))
        return UserReply(self.say(ctx, "thanks"), self.stop(ctx))

    @staticmethod
    def stop(ctx: EpisodeContext) -> str:
        """How it ends: ###STOP###, or ###TRANSFER### once the agent handed it over with a `hands_over` tool (which
        ends nothing by itself), as its instructions and τ²'s user say when transferred."""
        return "user_transfer" if handed_over(ctx.domain, ctx.messages) else "user_stop"

    @staticmethod
    async def _user_side_call(ctx: EpisodeContext, last: str) -> str | None:
        """Dual control: when the agent's last message names the next user-side call of the task's gold
        path ("toggle data" for toggle_data), make it on the sandbox and report what it showed."""
        from ..spec.models import call_parts

        mine = [call_parts(c) for c in ctx.task.task.expect.actions
                if getattr(ctx.domain.tools.get(call_parts(c)[0]), "side", None) == "user"]
        log = ctx.state.setdefault("user_tool_log", [])
        if len(log) >= len(mine):
            return None
        name, args = mine[len(log)]
        if name.replace("_", " ") not in last.lower():
            return None
        result = await ctx.env.acall(name, args)
        ctx.state.setdefault("user_calls", []).append({"name": name, "arguments": args})
        log.append(f"- {name}({args}) -> {result.content[:200]}")
        return f"Done. {result.content}"


# ---------------------------------------------------------------- LLM users


MAX_USER_TOOL_ROUNDS = 4


def _is_user_tool(ctx: EpisodeContext, name: str) -> bool:
    return any(t["function"]["name"] == name for t in ctx.user_tools)


def _not_yours(name: str):
    from ..env.results import ToolResult

    return ToolResult(f"Error: {name} is not something you can do yourself.", error=True)


class LiteLLMUser(UserSimulator):
    """Any litellm model (a provider, or a local OpenAI-compatible server via api_base)."""

    def __init__(self, llm_cfg):
        self.cfg = llm_cfg
        self.name = f"litellm:{llm_cfg.model}"

    async def respond(self, ctx: EpisodeContext) -> UserReply:
        from ..models.llm import complete

        history = flipped_history(ctx)
        if not history or history[-1]["role"] != "user":
            history.append({"role": "user", "content": "(The support chat has opened. Write your first message.)"})
        log = ctx.state.setdefault("user_tool_log", [])
        system = user_system_prompt(ctx)
        if log:  # what the user did on their side earlier (dual control); the agent never sees it
            system += "\n\n# Actions you took on your side so far\n" + "\n".join(log)
        messages = [{"role": "system", "content": system}, *history]
        total: dict[str, float] = {}
        for _ in range(MAX_USER_TOOL_ROUNDS):
            msg, usage = await complete(self.cfg, messages, tools=ctx.user_tools or None, seed=ctx.seed)
            for k, v in usage.items():
                total[k] = total.get(k, 0.0) + v
            if not msg["tool_calls"]:
                break
            # user-side tools (e.g. toggling a setting on the customer's own device) run on the same sandbox
            messages.append({"role": "assistant", "content": msg["content"] or None, "tool_calls": [
                {"id": c["id"], "type": "function", "function": {"name": c["name"], "arguments": c["arguments"]}}
                for c in msg["tool_calls"]]})
            for c in msg["tool_calls"]:
                result = await ctx.env.acall(c["name"], c["arguments"]) if _is_user_tool(ctx, c["name"]) else \
                    _not_yours(c["name"])
                ctx.state.setdefault("user_calls", []).append({"name": c["name"], "arguments": c["arguments"]})
                log.append(f"- {c['name']}({c['arguments']}) -> {result.content[:200]}")
                messages.append({"role": "tool", "tool_call_id": c["id"], "content": result.content})
        reply = split_stop(msg["content"] or "", ctx.domain.spec.domain.user_stop)
        reply.usage = total
        return reply

    def describe(self) -> dict[str, Any]:
        return {"user": "litellm", "model": self.cfg.model, "temperature": self.cfg.temperature, "api_base": self.cfg.api_base}


def small_model_messages(ctx: EpisodeContext) -> list[dict[str, str]]:
    """The user's prompt for small local models, which slip into the assistant role they were tuned for:
    a short system prompt in the customer's voice, the agent's words marked as the agent's, and a reminder
    of the role, the goal and the stop token after the agent's last message. (HFUser writes the opening
    message itself, from the goal, so the model sees one customer turn before it writes any; a trained
    user writes it too.) What a trained user learns from (train/user_sft.py) is this prompt."""
    return user_prompt(ctx.domain.spec, ctx.task.task, ctx.messages)


def user_prompt(spec, task, messages: list[dict[str, Any]]) -> list[dict[str, str]]:
    """small_model_messages for a domain's spec, a task (its TaskSpec's model) and the conversation so far:
    the persona, the goal and the facts the user may give, and the agent's words; never the tools or the data."""
    goal = task.user
    persona = spec.domain.personas.get(task.persona or "", "")
    lines = [f"You are a customer of this company: {spec.domain.description.strip()} You are chatting "
             "with its support agent. You are the customer, not the agent: never offer help. Write one short "
             "sentence per message, in the first person.",
             f"Your request: {first_person(goal.reason)}"]
    if goal.known:
        lines.append(f"Facts you give when the agent asks: {first_person(goal.known)}")
    if goal.unknown:
        lines.append(f"You do not know: {first_person(goal.unknown)} Never make such things up.")
    if goal.instructions:
        lines.append(f"Also: {goal.instructions.strip()}")
    if persona:
        lines.append(f"Your manner: {persona.strip()}")
    lines.append("When the agent asks you to confirm a change, answer " + (
        "'Yes, please go ahead.'" if goal.consent else "'No, please do not make that change.'"))
    lines.append(f"When the agent says your request is complete, or you have nothing left to ask, write only {STOP}.")
    history = [dict(m, content=f"Support agent: {m['content']}") if m["role"] == "user" else m
               for m in flipped(messages)]
    reminder = (f"(You are the customer. Your request: {first_person(goal.reason)} Reply to the agent in one or "
                f"two sentences; write {STOP} if your request is complete.)")
    if not history or history[-1]["role"] != "user":
        history.append({"role": "user", "content": "Support agent: Hello, how can I help you today?"})
    history[-1] = dict(history[-1], content=f"{history[-1]['content']}\n\n{reminder}")
    return [{"role": "system", "content": "\n".join(lines)}, *history]


def plays_user(path) -> bool:
    """Whether a model folder was trained to play the user (`muactl train user` marks its card)."""
    from ..models.folder import read_card

    return read_card(path).get("plays") == "user"


def user_draws(path) -> int:
    """How many times a sampled reply of this model may be drawn: its card's `draws` (`muactl train user` writes
    user_sft.draws), 1 for any other model."""
    from ..models.folder import read_card

    draws = read_card(path).get("draws", 1)
    return draws if isinstance(draws, int) and not isinstance(draws, bool) and draws >= 1 else 1


class HFUser(UserSimulator):
    """A local transformers model plays the user. Concurrent episodes' user turns share generate calls
    (models/batcher.py), as a local agent's turns do: one at a time, an LLM user made a 100-episode
    evaluation on a CPU take hours. As with local agents, a sampled (temperature > 0) reply's randomness
    comes from its batch (the seed derives from the batch's contents), not from the episode alone.
    `prompt`: "small" (default: the opening message is the goal in the first person, then
    small_model_messages) or "full" (the same prompt as LLM users, every message from the model).

    Sampled, a trained user's reply that breaks the user's own instructions (fidelity.py's reply_breaks: the goal
    left out of the opening, no unsaid fact when asked for details, an answer to "shall I proceed?" against the
    task's consent or a yes that also ends the chat, an opening that ends it, the agent's words) is
    drawn again with another seed, up to the card's `draws` in all (user_draws); when every draw broke one, the
    greedy reply is said. Sampling gives the variation and the draws keep it to what the task says; the episode's
    usage counts the redrawn replies (`user_redrawn`)."""

    def __init__(self, model_ref: str, temperature: float = 0.0, max_new_tokens: int = 128, prompt: str = "small",
                 max_batch: int = 64):
        self.model_ref, self.temperature, self.max_new_tokens, self.prompt = model_ref, temperature, max_new_tokens, prompt
        self.name = f"hf:{model_ref}"
        self.max_batch = max_batch

    async def respond(self, ctx: EpisodeContext) -> UserReply:
        from ..models.generation import load_model

        lm = load_model(self.model_ref, domain=ctx.domain)  # loaded once per process, shared by every episode
        if self.prompt == "small":
            # the opening: the goal, as the scripted user says it; a model trained to play the user writes its own
            if not any(m["role"] == "user" for m in ctx.messages) and not plays_user(lm.path):
                return UserReply(first_person(ctx.task.task.user.reason))
            messages = small_model_messages(ctx)
        else:
            history = flipped_history(ctx) or [{"role": "user", "content": "(The support chat has opened. Write your first message.)"}]
            messages = [{"role": "system", "content": user_system_prompt(ctx)}, *history]
        prompt = lm.prompt_ids(messages)
        draws = user_draws(lm.path) if self.temperature > 0 else 1
        redrawn = 0
        for k in range(draws):
            ids, _ = await self.queue(lm).submit(prompt, self.max_new_tokens, self.temperature, redraw_seed(ctx.seed, k))
            reply = split_stop(lm.reply_text(ids), ctx.domain.spec.domain.user_stop)
            if draws == 1 or reply_breaks(ctx.task, ctx.messages, reply.content, ends=reply.stop is not None) is None:
                break
            redrawn += 1
        else:  # every draw broke one of the user's instructions: the greedy reply
            ids, _ = await self.queue(lm, temperature=0.0).submit(prompt, self.max_new_tokens, 0.0, ctx.seed)
            reply = split_stop(lm.reply_text(ids), ctx.domain.spec.domain.user_stop)
        if redrawn:
            reply.usage = {"redrawn": float(redrawn)}
        return reply

    def queue(self, lm, temperature: float | None = None):
        """This user's queue on `lm` in the running event loop, shared by the users with its settings (a batch
        is generated with one max_new_tokens and one temperature: this user's, or `temperature`)."""
        t = self.temperature if temperature is None else temperature
        return lm.batcher(f"user {self.max_new_tokens} {t}", self.max_batch)


def redraw_seed(seed: int, k: int) -> int:
    """The sampling seed of an episode's k-th draw of one reply (the first keeps the episode's)."""
    return seed if k == 0 else zlib.crc32(f"{seed}:draw:{k}".encode())


def make_user(spec: str, api_base: str | None = None, temperature: float = 0.0, timeout_s: float = 60.0,
              retries: int = 4, backoff_s: float = 1.0, max_tokens: int | None = 1024) -> UserSimulator:
    """'scripted', 'scripted:varied', 'hf:<model>', or any litellm model id (e.g. openai/gpt-4o-mini)."""
    if spec in ("scripted", "scripted:varied"):
        return ScriptedUser(varied=spec == "scripted:varied")
    if spec.startswith("hf:"):
        return HFUser(spec[3:], temperature)
    from ..models.llm import LLMConfig

    return LiteLLMUser(LLMConfig(spec, api_base=api_base, temperature=temperature, timeout_s=timeout_s, retries=retries,
                                backoff_s=backoff_s, max_tokens=max_tokens))
