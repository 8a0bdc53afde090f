// The page's history (the camera's store: GET /api/events, /api/tracks/ID, /api/media/...):
// filters, a page of events at a time (newest first, the next by its cursor), each with its
// track's best snapshot, its clip played in place, a track's detail and, when the server has
// /api/search (/api/events' "features"), the tracks most like it; with "text" in them, a box
// to find tracks by words (GET /api/search?text=).
(function(){
const $=id=>document.getElementById(id);
const H={cursor:null,page:0,features:[]};
function when(t){return t==null?'':new Date(t*1000).toLocaleString();}
function button(text,cls,then){const b=document.createElement('button');b.type='button';
  b.textContent=text;b.className=cls;b.onclick=then;return b;}
function thumb(src){const im=document.createElement('img');im.className='hthumb';im.alt='snapshot';
  im.src=src;im.onerror=()=>im.classList.add('none');return im;}
function filters(keys){const q=new URLSearchParams();
  for(const el of $('hfilters').elements){
    if(el.name&&el.value.trim()&&(!keys||keys.includes(el.name)))q.set(el.name,el.value.trim());}
  return q;}
async function answer(url){
  const r=await fetch(url,{cache:'no-store'});let j;
  try{j=await r.json();}catch(e){j={error:r.status==404?'not found':'HTTP '+r.status};}
  return [r,j];}
function eventRow(e){
  const d=document.createElement('div');d.className='hev';d.dataset.id=e.id;
  if(e.track!=null)d.appendChild(thumb('/api/media/tracks/'+e.track+'/snapshot'));
  else if(e.snapshot)d.appendChild(thumb('/api/media/events/'+e.id+'/snapshot'));
  const t=document.createElement('span');const data=e.data||{};
  const sec=data.secondary?data.secondary+': ':'';
  t.textContent=when(e.time)+'  '+(e.camera||'')+'  '+e.kind+' '+(e.line||e.zone||'')+' '+
    (data.direction||'')+' '+sec+(e.label||'')+(e.track_id!=null?' #'+e.track_id:'');
  d.appendChild(t);
  if(e.clip&&!e.media_gone)d.appendChild(button('play clip','hplay',()=>play(e)));
  if(e.track!=null)d.appendChild(button('track','htrackbtn',()=>track(e.track)));
  return d;}
function trackRow(t,similarity){
  const d=document.createElement('div');d.className='hev htr';d.dataset.track=t.id;
  d.appendChild(thumb('/api/media/tracks/'+t.id+'/snapshot'));
  const s=document.createElement('span');
  s.textContent=(similarity!=null?similarity.toFixed(3)+'  ':'')+when(t.first_seen)+'  '+
    (t.camera||'')+'  '+(t.label||'')+' #'+t.track_id;
  d.appendChild(s);d.appendChild(button('track','htrackbtn',()=>track(t.id)));return d;}
async function load(next){
  if(next&&!H.cursor)return;  // the last page: nothing older (not the first page again)
  const q=filters();if(next)q.set('cursor',H.cursor);
  $('hstatus').textContent='loading...';
  try{const [r,j]=await answer('/api/events?'+q);
    if(!r.ok){$('hstatus').textContent=r.status==404?
      'no store on this camera (--store, or --clips/--snapshots)':j.error;return;}
    H.page=next?H.page+1:1;H.cursor=j.next_cursor;H.features=j.features||[];
    $('htext').hidden=!H.features.includes('text');
    $('hlist').replaceChildren(...j.events.map(eventRow));
    $('hnext').hidden=!H.cursor;
    $('hstatus').textContent='page '+H.page+': '+j.events.length+' event(s)'+
      (H.cursor?'; more on the next page':'');
  }catch(err){$('hstatus').textContent='cannot read the history: '+err;}}
function play(e){
  const v=$('hvideo');$('hplayer').hidden=false;
  $('hvcap').textContent='clip of '+e.kind+' '+(e.label||'')+' at '+when(e.time);
  v.src='/api/media/events/'+e.id+'/clip';v.play().catch(()=>{});}
async function track(id){
  const box=$('htrack');box.hidden=false;box.textContent='loading track '+id+'...';
  const [r,t]=await answer('/api/tracks/'+id);
  if(!r.ok){box.textContent=t.error;return;}
  const sec=Object.entries(t.secondary||{}).map(([k,v])=>k+': '+v.label).join(', ');
  const info=document.createElement('pre');
  info.textContent='track '+t.id+' (#'+t.track_id+' on '+t.camera+')\n'+
    'label    '+(t.label||'')+(t.labels.length>1?' ('+t.labels.join(', ')+')':'')+'\n'+
    'seen     '+when(t.first_seen)+' to '+when(t.last_seen)+'\n'+
    (t.zones.length?'zones    '+t.zones.join(', ')+'\n':'')+
    (t.lines.length?'lines    '+t.lines.join(', ')+'\n':'')+(sec?'second   '+sec+'\n':'');
  const parts=[thumb('/api/media/tracks/'+t.id+'/snapshot'),info];
  if(H.features.includes('search'))parts.push(button('find similar','hsimilar',()=>similar(t.id)));
  box.replaceChildren(...parts,...t.events.map(eventRow));}
async function similar(id){
  const box=$('hsimilar');box.hidden=false;box.textContent='searching...';
  const q=filters(['camera','label','since','until']);q.set('similar_to',id);q.set('limit','20');
  const [r,j]=await answer('/api/search?'+q);
  if(!r.ok){box.textContent=j.error||('HTTP '+r.status);return;}
  const head=document.createElement('b');head.textContent='like track '+id;
  box.replaceChildren(head,...(j.results||[]).map(x=>trackRow(x.track,x.similarity)));}
async function byText(words){  // GET /api/search?text= (the embedder's text tower)
  const box=$('hsimilar');box.hidden=false;box.textContent='searching...';
  const q=filters(['camera','label','since','until']);q.set('text',words);q.set('limit','20');
  const [r,j]=await answer('/api/search?'+q);
  if(!r.ok){box.textContent=j.error||('HTTP '+r.status);return;}
  const head=document.createElement('b');head.textContent='like "'+words+'"';
  box.replaceChildren(head,...(j.results||[]).map(x=>trackRow(x.track,x.similarity)));}
$('hfilters').onsubmit=ev=>{ev.preventDefault();load(false);};
$('htext').onsubmit=ev=>{ev.preventDefault();byText($('htext').elements.text.value.trim());};
$('hnext').onclick=()=>load(true);
load(false);
})();
