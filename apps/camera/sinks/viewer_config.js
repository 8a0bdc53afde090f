// The page's configuration (GET /config: the running configuration, credentials redacted by
// the route): its version, the cameras (name -> stream), the last change or refusal and the
// configuration itself as indented text; read every few seconds, drawn again only when it
// changed. A run without one (404) hides the section and stops asking.
(function(){
const $=id=>document.getElementById(id);
const EVERY_MS=2000;
let seen=null;
function scalar(v){return v===null?'null':typeof v==='string'?(v===''?"''":v):String(v);}
// a value on its key's line: a scalar, an empty object, a short list of scalars
function flat(v){return v===null||typeof v!=='object'||(Array.isArray(v)?
  v.every(x=>x===null||typeof x!=='object')&&inline(v).length<=60:!Object.keys(v).length);}
function inline(v){
  if(Array.isArray(v))return '['+v.map(scalar).join(', ')+']';
  return v!==null&&typeof v==='object'?'{}':scalar(v);}
// data as YAML-like lines: a key (or '-') and its value, nested values indented under it
function lines(v,ind,out){
  const items=Array.isArray(v)?v.map(x=>['-',x]):Object.entries(v).map(([k,x])=>[k+':',x]);
  for(const [key,x] of items){
    if(flat(x))out.push(ind+key+' '+inline(x));
    else{out.push(ind+key);lines(x,ind+'  ',out);}}
  return out;}
function when(t){return t==null?'':new Date(t*1000).toLocaleTimeString();}
function lastText(last){
  if(!last)return 'none since the start';
  const by=last.requested_by?' ('+last.requested_by+')':'';
  if(last.event==='config_refused')
    return when(last.time)+' refused'+by+': '+last.reason;
  const head=when(last.time)+' applied'+by+(last.from?' over '+last.from:'')+
    (last.version?', now '+last.version:'');
  return head+((last.changes||[]).length?'\n'+last.changes.map(c=>'  '+c).join('\n'):'');}
function draw(c){
  $('cfgversion').textContent=c.version||'(none)';
  $('cfgcounts').textContent=c.applied+' applied, '+c.refused+' refused while it ran';
  $('cfgcameras').textContent=Object.entries(c.cameras||{})
    .map(([name,i])=>name+' \u2192 stream '+i).join('\n');
  const last=$('cfglast');last.textContent=lastText(c.last);
  last.className=c.last&&c.last.event==='config_refused'?'refused':'';
  $('cfgtext').textContent=lines(c.config||{},'',[]).join('\n');}
async function poll(){
  try{const r=await fetch('/config',{cache:'no-store'});
    if(r.status===404){$('config').hidden=true;return;}
    if(r.ok){const c=await r.json();$('config').hidden=false;
      const key=JSON.stringify([c.version,c.applied,c.refused,c.last]);
      if(key!==seen){seen=key;draw(c);}}
  }catch(e){}
  setTimeout(poll,EVERY_MS);}
poll();
})();
